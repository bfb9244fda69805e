package main

// The adaptive bench's variants: how one process of the fleet keeps to
// the fake upstream's hidden limits. The table is where the redsem
// adaptive limiter (issue 33) plugs in: give its entry a New.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	gclcore "github.com/platinummonkey/go-concurrency-limits/core"
	gcllimit "github.com/platinummonkey/go-concurrency-limits/limit"
	gcllimiter "github.com/platinummonkey/go-concurrency-limits/limiter"
	gclstrategy "github.com/platinummonkey/go-concurrency-limits/strategy"
	xrate "golang.org/x/time/rate"

	"github.com/redsem/redsem/httplimit"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// adaptiveVariant is one way for the fleet to keep to the hidden limits.
type adaptiveVariant struct {
	Name   string
	Config string // how it is set up, for the report
	// Oracle: the parent stores the hidden limits as the name's
	// fleet-wide limit and rate (Inspector.SetLimit, SetRate) the moment
	// they change.
	Oracle bool
	// New builds one process's client; nil: not built yet, so the row is
	// listed and not run.
	New func(p adaptiveProc) (adaptiveClient, error)
}

// The bounds a learning variant is given (issue 33's goals): it starts
// from a guess of 2 at once and 5/s, and may go from 1 to 64 and from
// 1/s to 500/s.
const (
	learnMinLimit, learnStartLimit, learnMaxLimit = 1, 2, 64
	learnMinRate, learnStartRate, learnMaxRate    = 1, 5, 500
)

const (
	variantOracle   = "oracle"
	variantAIMD     = "per-process AIMD"
	variantFixed    = "fixed guess"
	variantAdaptive = "redsem adaptive"
	variantRate     = "redsem adaptive rate"
)

var adaptiveVariants = []adaptiveVariant{
	{Name: variantOracle, Oracle: true,
		Config: "httplimit.Transport, Limit and Rate (burst 1) = the hidden ones, stored fleet-wide at each change",
		New: func(p adaptiveProc) (adaptiveClient, error) {
			return newRedsemClient(p, p.Cfg.Limit, p.Cfg.Rate)
		}},
	{Name: variantAIMD,
		Config: fmt.Sprintf("go-concurrency-limits v1.0.0 AIMDLimit (x0.9, +1) in a DefaultLimiter (window 1s, >=10 samples) + BlockingLimiter, per process from %d; x/time/rate per process from %g/s moved by the same law once a second; a 429 waits its Retry-After in its goroutine",
			perProcStartLimit(), perProcStartRate()),
		New: newAIMDClient},
	{Name: variantFixed,
		Config: fmt.Sprintf("httplimit.Transport, Limit %d, Rate %d/s (burst 1), never moved", learnStartLimit, learnStartRate),
		New: func(p adaptiveProc) (adaptiveClient, error) {
			return newRedsemClient(p, learnStartLimit, learnStartRate)
		}},
	{Name: variantAdaptive,
		Config: fmt.Sprintf("httplimit.Transport, limit and rate learned fleet-wide (limiter.Adaptive(%d, %d): one option, so the rate starts at %d/s too), bounds %d at once and %d/s (burst 1)",
			learnMinLimit, learnStartLimit, learnStartLimit, learnMaxLimit, learnMaxRate),
		New: func(p adaptiveProc) (adaptiveClient, error) {
			return newRedsemClient(p, learnMaxLimit, learnMaxRate, limiter.Adaptive(learnMinLimit, learnStartLimit))
		}},
	// The rate alone, for an upstream that advertises it (-adaptive-headers):
	// the headers' figure without the calls at once' learning.
	{Name: variantRate,
		Config: fmt.Sprintf("httplimit.Transport, no limit at once, the rate learned fleet-wide (limiter.Adaptive(%d, %d)), bound %d/s (burst 1)",
			learnMinRate, learnStartRate, learnMaxRate),
		New: func(p adaptiveProc) (adaptiveClient, error) {
			return newRedsemClient(p, 0, learnMaxRate, limiter.Adaptive(learnMinRate, learnStartRate))
		}},
}

func adaptiveVariantNamed(name string) (adaptiveVariant, bool) {
	i := slices.IndexFunc(adaptiveVariants, func(v adaptiveVariant) bool { return v.Name == name })
	if i < 0 {
		return adaptiveVariant{}, false
	}
	return adaptiveVariants[i], true
}

// adaptiveKey puts every call on one name: the run's Name + ":upstream".
func adaptiveKey(*http.Request) (string, bool) { return "upstream", true }

func adaptiveName(prefix string) string { return prefix + ":upstream" }

// redsemClient is a process's httplimit.Transport of fixed limit and rate
// (which the oracle's parent overrides fleet-wide).
type redsemClient struct {
	lc      *limiter.Client
	rt      *httplimit.Transport
	learned string // the learned rate's name ("": fixed)
	limit   int64
}

// newRedsemClient is a Transport of limit at once and rate a second;
// opts (limiter.Adaptive) make its rate learned.
func newRedsemClient(p adaptiveProc, limit, rate int64, opts ...limiter.NameOption) (adaptiveClient, error) {
	// The bench's Redis is new and nobody held leases on it before: no
	// restart quarantine to wait out.
	lc, err := limiter.New(p.RDB, limiter.RestartQuarantine(0))
	if err != nil {
		return nil, err
	}
	rt, err := httplimit.NewTransport(lc, httplimit.TransportConfig{
		Name: p.Cfg.Name, Limit: limit, Rate: limiter.Rate{Events: rate, Per: time.Second, Burst: 1},
		Key: adaptiveKey, Base: p.Base,
		// A guess of 5/s makes the 32 callers wait up to ~6s for a slot:
		// wait, as a worker would, rather than fail.
		AcquireTimeout: 30 * time.Second,
	}, httplimit.LimiterOptions(opts...))
	if err != nil {
		_ = lc.Close(context.Background())
		return nil, err
	}
	c := &redsemClient{lc: lc, rt: rt, limit: limit}
	if len(opts) > 0 {
		c.learned = p.Cfg.Name + ":upstream" // the Transport's name for adaptiveKey
	}
	return c, nil
}

func (c *redsemClient) Do(req *http.Request) (int, error) {
	resp, err := doHTTP(c.rt, req)
	if err != nil {
		return 0, err
	}
	return resp.StatusCode, nil // a 429 has paused the name for every process
}

// Learned reads the fleet's learned rate; each process reports its
// share, since the bench sums the processes' samples.
func (c *redsemClient) Learned() (float64, float64, bool) {
	if c.learned == "" {
		return 0, 0, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	insp := inspect.New(c.lc)
	st, err := insp.Rate(ctx, c.learned)
	if err != nil || st.Learned == nil {
		return 0, 0, false
	}
	var limit int64
	if c.limit > 0 {
		if limit, err = insp.Limit(ctx, c.learned); err != nil {
			return 0, 0, false
		}
	}
	return float64(limit) / adaptiveProcs, float64(st.Fleet.Events) / adaptiveProcs, true
}

func (c *redsemClient) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.lc.Close(ctx)
}

// Per-process AIMD starts from the fleet's guess split over the
// processes, as a user who sets each process's limiter would; the
// library's limit cannot go below 1.
func perProcStartLimit() int { return max(learnStartLimit/adaptiveProcs, 1) }

func perProcStartRate() float64 { return float64(learnStartRate) / adaptiveProcs }

// aimdClient is go-concurrency-limits as its blocking example uses it
// (DefaultLimiter + BlockingLimiter, OnSuccess/OnDropped per call), with
// an AIMDLimit, in front of a per-process x/time/rate limiter that the
// library has no counterpart for (rateAIMD moves it).
type aimdClient struct {
	base  http.RoundTripper
	dl    *gcllimiter.DefaultLimiter
	lim   *gcllimiter.BlockingLimiter
	rate  *rateAIMD
	close context.CancelFunc
}

func newAIMDClient(p adaptiveProc) (adaptiveClient, error) {
	start := perProcStartLimit()
	aimd := gcllimit.NewAIMDLimit("bench", start, 0.9, 1, gclcore.EmptyMetricRegistryInstance)
	// The library's default window wants 100 samples, one limit update
	// per ~8s at a process's share of 50/s; 10 is the least it accepts.
	dl, err := gcllimiter.NewDefaultLimiter(aimd, int64(time.Second), int64(time.Second), 1e5, 10,
		gclstrategy.NewSimpleStrategy(start), gcllimit.NoopLimitLogger{}, gclcore.EmptyMetricRegistryInstance)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra := newRateAIMD(perProcStartRate(), learnMinRate/float64(adaptiveProcs), learnMaxRate/float64(adaptiveProcs))
	go ra.run(ctx)
	return &aimdClient{base: p.Base, dl: dl, lim: gcllimiter.NewBlockingLimiter(dl, 0, nil), rate: ra, close: cancel}, nil
}

func (c *aimdClient) Do(req *http.Request) (int, error) {
	ctx := req.Context()
	if err := c.rate.lim.Wait(ctx); err != nil {
		return 0, err
	}
	tok, ok := c.lim.Acquire(ctx)
	if !ok {
		return 0, errors.Join(errors.New("aimd: no token"), ctx.Err())
	}
	c.rate.started()
	resp, err := doHTTP(c.base, req)
	switch {
	case err != nil:
		tok.OnIgnore()
		return 0, err
	case resp.StatusCode == http.StatusTooManyRequests:
		tok.OnDropped()
		c.rate.dropped()
		sleepCtx(ctx, retryAfter(resp)) // this call's Retry-After, this goroutine only
	default:
		tok.OnSuccess()
	}
	return resp.StatusCode, nil
}

func (c *aimdClient) Learned() (float64, float64, bool) {
	return float64(c.dl.EstimatedLimit()), c.rate.now(), true
}

func (c *aimdClient) Close() { c.close() }

// rateAIMD moves a per-process x/time/rate limit by the library's
// AIMDLimit law, once a second (its window): after a second with a 429,
// max(r-1, 0.9r); after a second whose starts used the rate (within one
// call: the library's "in flight >= limit"), r+1; within [lo, hi].
type rateAIMD struct {
	mu        sync.Mutex
	lim       *xrate.Limiter
	r, lo, hi float64
	n         int  // calls started this second
	drop      bool // a 429 this second
}

func newRateAIMD(start, lo, hi float64) *rateAIMD {
	return &rateAIMD{lim: xrate.NewLimiter(xrate.Limit(start), 1), r: start, lo: lo, hi: hi}
}

func (a *rateAIMD) started() { a.mu.Lock(); a.n++; a.mu.Unlock() }

func (a *rateAIMD) dropped() { a.mu.Lock(); a.drop = true; a.mu.Unlock() }

func (a *rateAIMD) now() float64 { a.mu.Lock(); defer a.mu.Unlock(); return a.r }

func (a *rateAIMD) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.mu.Lock()
		switch {
		case a.drop:
			a.r = math.Max(a.lo, math.Min(a.r-1, 0.9*a.r))
		case float64(a.n) >= a.r-1:
			a.r = math.Min(a.hi, a.r+1)
		}
		a.n, a.drop = 0, false
		a.lim.SetLimit(xrate.Limit(a.r))
		a.mu.Unlock()
	}
}
