package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/httplimit"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// hiddenRate is an upstream that takes at most perSecond calls in any
// second and answers the others 429 with Retry-After: 1, counting both
// per 100ms.
type hiddenRate struct {
	perSecond int
	start     time.Time

	mu       sync.Mutex
	window   []time.Time // accepted calls of the last second
	accepted map[int]int // per 100ms bucket
	refused  map[int]int
}

func newHiddenRate(perSecond int) *hiddenRate {
	return &hiddenRate{perSecond: perSecond, start: time.Now(), accepted: map[int]int{}, refused: map[int]int{}}
}

func (h *hiddenRate) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	now := time.Now()
	h.mu.Lock()
	for len(h.window) > 0 && now.Sub(h.window[0]) >= time.Second {
		h.window = h.window[1:]
	}
	bucket := int(now.Sub(h.start) / (100 * time.Millisecond))
	ok := len(h.window) < h.perSecond
	if ok {
		h.window = append(h.window, now)
		h.accepted[bucket]++
	} else {
		h.refused[bucket]++
	}
	h.mu.Unlock()
	if !ok {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

// counts are the calls accepted and refused from..to after its start.
func (h *hiddenRate) counts(from, to time.Duration) (accepted, refused int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for b := int(from / (100 * time.Millisecond)); b < int(to/(100*time.Millisecond)); b++ {
		accepted += h.accepted[b]
		refused += h.refused[b]
	}
	return accepted, refused
}

// runLearnChildren runs n runLearnChild processes against the Redis at
// addr and the upstream at url for secs seconds, and waits for them.
func runLearnChildren(t *testing.T, n int, addr, url string, secs int) {
	t.Helper()
	var cmds []*exec.Cmd
	for range n {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), redistest.ChildEnv+"=learn-client", "HTTPLIMIT_REDIS="+addr,
			"HTTPLIMIT_URL="+url, "HTTPLIMIT_SECS="+strconv.Itoa(secs))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
	}
}

// runLearnChild calls HTTPLIMIT_URL from 6 goroutines for HTTPLIMIT_SECS
// seconds through a Transport whose rate is learned from 5/s, up to 200/s.
func runLearnChild() int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("HTTPLIMIT_REDIS")})
	defer rdb.Close()
	lc, err := limiter.New(rdb, limiter.RestartQuarantine(0))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer lc.Close(context.Background())
	rt, err := httplimit.NewTransport(lc, httplimit.TransportConfig{Name: "learn",
		Rate: limiter.Rate{Events: 200, Per: time.Second, Burst: 1}}, httplimit.LimiterOptions(limiter.Adaptive(1, 5)))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	hc := &http.Client{Transport: rt}
	secs, _ := strconv.Atoi(os.Getenv("HTTPLIMIT_SECS"))
	end := time.Now().Add(time.Duration(secs) * time.Second)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for time.Now().Before(end) {
				ctx, cancel := context.WithDeadline(context.Background(), end)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, os.Getenv("HTTPLIMIT_URL"), nil)
				if resp, err := hc.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				cancel()
			}
		})
	}
	wg.Wait()
	return 0
}

// Three processes whose Transports learn the rate of an upstream that
// takes 40 calls a second (they start at 5/s, bounded by 200/s) find it
// together: over the last 6 of 16 seconds the upstream accepts most of
// its 40/s and refuses few calls, and the fleet's learned rate is near 40.
// (A probe past 40/s costs the fleet a Retry-After of 1s about every 7s:
// the window holds at most one.)
// A fixed 200/s would be refused most of the time; a rate that does not
// grow would stay at 5/s.
func TestTransportLearnsTheRateAcrossProcesses(t *testing.T) {
	srv := redistest.StartServer(t)
	up := newHiddenRate(40)
	ts := httptest.NewServer(up)
	defer ts.Close()
	const secs, last = 16, 6
	runLearnChildren(t, 3, srv.Addr(), ts.URL, secs)
	// The children's last seconds, whenever a loaded machine let them
	// start: they stopped calling at most about 0.5s before they exited.
	done := time.Since(up.start)
	accepted, refused := up.counts(done-(last*time.Second+500*time.Millisecond), done-500*time.Millisecond)
	insp := inspect.New(redistest.Limiter(t, srv.Client(t)))
	names, err := insp.RateNames(context.Background(), "learn:*") // the Transport's name and the upstream's key
	if err != nil || len(names) != 1 {
		t.Fatalf("rate names %v, %v; want one", names, err)
	}
	st, err := insp.Rate(context.Background(), names[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("last %ds: %d accepted (%.1f/s), %d refused; learned %d/s (%+v)", last, accepted, float64(accepted)/last, refused, st.Fleet.Events, st.Learned)
	if accepted < last*24 {
		t.Errorf("the upstream accepted %.1f/s over the last %ds, want most of its 40/s", float64(accepted)/last, last)
	}
	if refused*10 > accepted {
		t.Errorf("%d refused against %d accepted over the last %ds: the fleet kept overloading", refused, accepted, last)
	}
	if st.Learned == nil || st.Fleet.Events < 20 || st.Fleet.Events > 60 {
		t.Errorf("learned %d/s (%+v), want near the upstream's 40/s", st.Fleet.Events, st.Learned)
	}
}

// RateOptions learns the Rate alone: a 429 cuts the learned rate and
// leaves the Limit of 5 as it is, where LimiterOptions would cut both
// (the limit from its use, the one request in flight).
func TestRateOptionsLearnTheRateAlone(t *testing.T) {
	e := newEnv(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(up.Close)
	rt, err := httplimit.NewTransport(e.lc, httplimit.TransportConfig{Name: "api", Limit: 5,
		Rate: limiter.Rate{Events: 30, Per: time.Second, Burst: 1}}, httplimit.RateOptions(limiter.Adaptive(1, 30)))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt}).Get(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ctx := ctxT(t, 5*time.Second)
	name := "api:" + up.Listener.Addr().String()
	in := inspect.New(e.lc)
	st, err := in.Rate(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Learned == nil || st.Learned.Value >= 30 || st.Fleet.Events >= 30 {
		t.Fatalf("rate after a 429: %+v (learned %+v), want the learned 30/s cut", st.Fleet, st.Learned)
	}
	if n, err := in.Limit(ctx, name); err != nil || n != 0 {
		t.Fatalf("fleet limit after a 429: %d (%v), want none: the Limit is not learned", n, err)
	}
}
