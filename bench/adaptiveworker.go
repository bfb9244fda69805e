package main

// The adaptive bench's worker processes (-adaptive, adaptive.go): each
// runs goroutines that call the fake upstream back to back through one
// variant's limits until told to stop, and reports what it saw and, for
// a variant that learns, what it applied every 100 ms.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// adaptiveEnv carries an adaptive worker's adaptiveWorkerConfig (JSON).
const adaptiveEnv = "REDSEM_BENCH_ADAPTIVE_WORKER"

// adaptiveWorkerConfig is what an adaptive worker process is told.
type adaptiveWorkerConfig struct {
	Proc, Procs int
	Goroutines  int
	Variant     string
	RedisAddr   string
	API         string // the fake upstream's base URL
	Name        string // the limiter name prefix of this run (fresh state per run)
	Limit       int64  // the hidden limits at the start: the oracle's configuration
	Rate        int64
}

// adaptiveReport is what a worker tells the parent when it stops.
type adaptiveReport struct {
	Proc     int             `json:"proc"`
	Calls    int64           `json:"calls"`
	OK       int64           `json:"ok"`
	TooMany  int64           `json:"tooMany"`
	Errors   int64           `json:"errors"`
	FirstErr string          `json:"firstErr,omitempty"`
	Sent     int64           `json:"sent"` // commands sent to Redis (a go-redis hook)
	Learned  []learnedSample `json:"learned,omitempty"`
	Err      string          `json:"err,omitempty"`
}

// learnedSample is what a process applied at Ms after "go".
type learnedSample struct {
	Ms    int64   `json:"ms"`
	Limit float64 `json:"l"`
	Rate  float64 `json:"r"`
}

// adaptiveClient is one process's way through a variant's limits.
type adaptiveClient interface {
	// Do sends req, reads and closes the body, and returns the status. It
	// does what the variant does on a 429 before returning (the AIMD
	// variant's goroutine waits out the Retry-After itself; redsem's
	// Transport has paused the name for everyone).
	Do(req *http.Request) (int, error)
	// Learned is the calls at once and per second the process applies
	// now, for a variant that learns them (ok false otherwise).
	Learned() (limit, rate float64, ok bool)
	Close()
}

// adaptiveProc is what a variant's constructor gets.
type adaptiveProc struct {
	Cfg adaptiveWorkerConfig
	RDB *redis.Client
	// Base sends the requests (a pooled http.Transport).
	Base http.RoundTripper
}

// IsAdaptiveWorker says whether this process is an adaptive worker.
func IsAdaptiveWorker() bool { return os.Getenv(adaptiveEnv) != "" }

// AdaptiveWorkerMain runs an adaptive worker: it reads its config,
// prints "ready", calls from "go" to "stop" (or the end of stdin) and
// prints its report as one JSON line.
func AdaptiveWorkerMain() int {
	var cfg adaptiveWorkerConfig
	if err := json.Unmarshal([]byte(os.Getenv(adaptiveEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "adaptive worker: bad", adaptiveEnv, err)
		return 2
	}
	rep, err := runAdaptiveWorker(cfg, os.Stdin, os.Stdout)
	if err != nil {
		rep.Err = err.Error()
	}
	if jerr := json.NewEncoder(os.Stdout).Encode(rep); jerr != nil || err != nil {
		fmt.Fprintln(os.Stderr, "adaptive worker:", err, jerr)
		return 1
	}
	return 0
}

func runAdaptiveWorker(cfg adaptiveWorkerConfig, in io.Reader, out io.Writer) (rep adaptiveReport, err error) {
	rep.Proc = cfg.Proc
	v, ok := adaptiveVariantNamed(cfg.Variant)
	if !ok || v.New == nil {
		return rep, fmt.Errorf("variant %q: not available", cfg.Variant)
	}
	var sent atomic.Int64
	rdb := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	rdb.AddHook(countHook{&sent})
	base := &http.Transport{MaxIdleConnsPerHost: 2 * cfg.Goroutines}
	defer base.CloseIdleConnections()
	c, err := v.New(adaptiveProc{Cfg: cfg, RDB: rdb, Base: base})
	if err != nil {
		return rep, err
	}
	defer c.Close()

	sent.Store(0)
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return rep, err
	}
	br := bufio.NewReader(in)
	if line, err := br.ReadString('\n'); err != nil || line != "go\n" {
		return rep, fmt.Errorf("waiting for go: %q %v", line, err)
	}
	ctx, stop := context.WithCancel(context.Background())
	go func() { _, _ = br.ReadString('\n'); stop() }() // "stop", or the end of stdin
	callLoop(ctx, cfg, c, &rep)
	rep.Sent = sent.Load()
	return rep, nil
}

// callLoop runs the goroutines until ctx ends, samples what the client
// applies every 100 ms, and fills rep.
func callLoop(ctx context.Context, cfg adaptiveWorkerConfig, c adaptiveClient, rep *adaptiveReport) {
	var calls, ok, tooMany, errs atomic.Int64
	var firstErr sync.Once
	var wg sync.WaitGroup
	for g := range cfg.Goroutines {
		wg.Go(func() {
			url := cfg.API + "/call?p=" + strconv.Itoa(cfg.Proc) + "&g=" + strconv.Itoa(g)
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				st, err := c.Do(req)
				switch {
				case ctx.Err() != nil:
					return // cut short by the stop: not counted
				case err != nil:
					errs.Add(1)
					firstErr.Do(func() { rep.FirstErr = err.Error() })
					sleepCtx(ctx, 100*time.Millisecond) // no spinning on a broken Redis
					continue
				case st == http.StatusTooManyRequests:
					tooMany.Add(1)
				case st == http.StatusOK:
					ok.Add(1)
				}
				calls.Add(1)
			}
		})
	}
	rep.Learned = sampleLearned(ctx, c)
	wg.Wait()
	rep.Calls, rep.OK, rep.TooMany, rep.Errors = calls.Load(), ok.Load(), tooMany.Load(), errs.Load()
}

// sampleLearned records c.Learned every 100 ms until ctx ends (nil for a
// client that learns nothing).
func sampleLearned(ctx context.Context, c adaptiveClient) []learnedSample {
	t0 := time.Now()
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	var out []learnedSample
	for {
		if l, r, ok := c.Learned(); ok {
			out = append(out, learnedSample{Ms: time.Since(t0).Milliseconds(), Limit: l, Rate: r})
		}
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
	}
}

// sampleEvery is how often the upstream and the workers sample.
const sampleEvery = 100 * time.Millisecond

// doHTTP sends req with rt, drains and closes the body.
func doHTTP(rt http.RoundTripper, req *http.Request) (*http.Response, error) {
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp, nil
}

// retryAfter reads a 429's Retry-After seconds (1s when absent).
func retryAfter(resp *http.Response) time.Duration {
	secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || secs < 1 {
		secs = 1
	}
	return time.Duration(secs) * time.Second
}
