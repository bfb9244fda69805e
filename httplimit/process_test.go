package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/httplimit"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// The cross-process test re-runs this test binary as clients (runChild,
// the HTTPLIMIT_PROC-th); the runnable Examples find their server in
// REDIS_ADDR.
func TestMain(m *testing.M) {
	redistest.Main(m, map[string]func() int{"client": runChild, "rate-client": runRateChild, "learn-client": runLearnChild, "knee-client": runKneeChild})
}

const childWorkers, childRounds = 8, 12

// runChild sends childWorkers × childRounds requests through a Transport
// of its own limiter Client, reading every body to the end.
func runChild() int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("HTTPLIMIT_REDIS")})
	defer rdb.Close()
	lc, err := limiter.New(rdb, limiter.RestartQuarantine(0))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer lc.Close(context.Background())
	limit, _ := strconv.ParseInt(os.Getenv("HTTPLIMIT_LIMIT"), 10, 64)
	rt, err := httplimit.NewTransport(lc, httplimit.TransportConfig{Name: "procs", Limit: limit, AcquireTimeout: time.Minute})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	hc := &http.Client{Transport: rt}
	defer hc.CloseIdleConnections()
	url := os.Getenv("HTTPLIMIT_URL")
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range childWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range childRounds {
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Header.Set("X-Proc", os.Getenv("HTTPLIMIT_PROC"))
				resp, err := hc.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
				if err != nil {
					failed.Store(&err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		fmt.Println("error", *err)
		return 1
	}
	return 0
}

// Two processes, each with its own limiter Client and Transport, send
// requests to one upstream; the upstream's own count of requests in at
// once never exceeds the limit. A per-process cap would let up to twice
// the limit in.
func TestTransportCapAcrossProcesses(t *testing.T) {
	const limit, procs = 3, 2
	srv := redistest.StartServer(t)
	var (
		c       redistest.Gauge
		perProc [procs + 1]atomic.Int64
		overlap atomic.Bool // both processes had requests in at once
	)
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		p, _ := strconv.Atoi(r.Header.Get("X-Proc"))
		c.Enter()
		perProc[p].Add(1)
		if perProc[3-p].Load() > 0 {
			overlap.Store(true)
		}
		defer func() { perProc[p].Add(-1); c.Leave() }()
		io.WriteString(w, "streamed ")
		w.(http.Flusher).Flush()
		time.Sleep(5 * time.Millisecond)
		io.WriteString(w, "body")
	})
	var wg sync.WaitGroup
	outs := make([][]byte, procs)
	errs := make([]error, procs)
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), redistest.ChildEnv+"=client", "HTTPLIMIT_PROC="+strconv.Itoa(i+1), "HTTPLIMIT_REDIS="+srv.Addr(),
			"HTTPLIMIT_URL="+up.URL, "HTTPLIMIT_LIMIT="+strconv.Itoa(limit))
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	for i := range procs {
		if errs[i] != nil {
			t.Fatalf("process %d: %v\n%s", i+1, errs[i], outs[i])
		}
	}
	if n, want := c.Total(), int64(procs*childWorkers*childRounds); n != want {
		t.Fatalf("the upstream served %d requests, want %d", n, want)
	}
	if p := c.Peak(); p > limit || p < 2 {
		t.Fatalf("peak of %d requests at once from %d processes with a limit of %d (2..%d expected)", p, procs, limit, limit)
	}
	if !overlap.Load() {
		t.Fatal("the processes' requests never overlapped: the test proves nothing")
	}
	t.Logf("%d requests from %d processes, peak %d of %d", c.Total(), procs, c.Peak(), limit)
}

// runRateChild sends one request through a Transport with a rate, of a
// limiter Client of its own, waiting up to 10s for its slot.
func runRateChild() int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("HTTPLIMIT_REDIS")})
	defer rdb.Close()
	lc, err := limiter.New(rdb, limiter.RestartQuarantine(0))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer lc.Close(context.Background())
	rt, err := httplimit.NewTransport(lc, httplimit.TransportConfig{Name: "paused", Rate: rate100, AcquireTimeout: 10 * time.Second})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	hc := &http.Client{Transport: rt}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(os.Getenv("HTTPLIMIT_URL"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	resp.Body.Close()
	return 0
}

// An answer through one process's Transport that says to wait 2s pauses
// the upstream's name for another process: its request, sent right
// after, reaches the upstream only when the pause ends, though its rate
// alone would let it through at once. Either a 429 with Retry-After: 2,
// or a 200 whose headers say the quota is spent until a reset 2s ahead.
func TestTransportPauseAcrossProcesses(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer func(w http.ResponseWriter)
	}{
		{"429", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
		}},
		{"spent-quota", func(w http.ResponseWriter) {
			w.Header().Set("RateLimit-Limit", "100")
			w.Header().Set("RateLimit-Remaining", "0")
			w.Header().Set("RateLimit-Reset", "2")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			arrived := make(chan time.Time, 1)
			up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/limited" {
					c.answer(w)
					return
				}
				arrived <- time.Now()
			})
			rt := transport(t, e.lc, httplimit.TransportConfig{Name: "paused", Rate: rate100})
			resp, err := httpClient(t, rt).Get(up.URL + "/limited")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			told := time.Now()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), redistest.ChildEnv+"=rate-client", "HTTPLIMIT_REDIS="+e.srv.Addr(), "HTTPLIMIT_URL="+up.URL)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			at := <-arrived
			if d := at.Sub(told); d < 1900*time.Millisecond || d > 4*time.Second {
				t.Fatalf("the other process's request arrived %v after the answer, want about 2s", d)
			}
		})
	}
}
