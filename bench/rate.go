package main

// Rate scenarios: redsem's RateLimit beside go-redis/redis_rate, both
// GCRA in one Lua script per call, and golang.org/x/time/rate, the same
// in one process's memory, as the floor. redsem reserves a time and the
// caller sleeps until it; redis_rate answers "not now, retry after X", so
// a waiter polls, as its README's Allow loop does; x/time/rate reserves
// in memory and sleeps. Two scenarios: uncontended Allow (one goroutine,
// a rate it never reaches) and waiters on one name in 8 processes asking
// at twice the rate (multiproc.go's workers, a rate Lib in place of a
// lock); x/time/rate, a limit of one process, runs the same goroutines in
// one process.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"golang.org/x/time/rate"

	"github.com/redsem/redsem/limiter"
)

var (
	// allowRate is the uncontended scenario's rate: never reached, so
	// every Allow is granted and every library runs its whole script.
	allowRate = limiter.Rate{Events: 1_000_000, Per: time.Second, Burst: 1_000_000}
	// waitRate is the contended scenario's rate; RateScenario's
	// goroutines ask for twice as many events.
	waitRate = limiter.Rate{Events: 200, Per: time.Second, Burst: 10}
)

// askEvery paces each of RateScenario's goroutines so that together they
// ask for twice waitRate: procs·goroutines / (2·rate).
func askEvery(goroutines int) time.Duration {
	return time.Duration(goroutines) * waitRate.Per / time.Duration(2*waitRate.Events)
}

// RateScenario: 8 processes x 4 goroutines wait for events on one name,
// asking at twice the rate (all at the start, then each at most every
// askEvery: in practice again as soon as it got one, the queue being
// longer). Limit is huge: the lock analysis (peak holders, violations)
// does not apply to a rate.
var RateScenario = MultiScenario{Name: fmt.Sprintf("rate %s, 8 procs x 4 asking at 2x", waitRate), Procs: 8, Goroutines: 4,
	Limit: 1 << 40, Every: askEvery(32)}

// RateScenarioOneProc is RateScenario's 32 goroutines in one process, for
// a limiter of one process (x/time/rate).
var RateScenarioOneProc = MultiScenario{Name: fmt.Sprintf("rate %s, 1 proc x 32 asking at 2x", waitRate), Procs: 1, Goroutines: 32,
	Limit: 1 << 40, Every: askEvery(32)}

const xrateName = "x/time/rate"

// AllowLibs make one Allow per Locker call on allowRate; a refusal is an
// error (it must not happen). The first is redsem, the second the peer
// the ratios are to.
var AllowLibs = []Lib{
	{Name: "redsem RateLimit", Config: "RateLimit.Allow, " + allowRate.String() + "; one FCALL", New: redsemAllow},
	{Name: "redis_rate", Config: "Limiter.Allow, same rate; one EVALSHA", New: redisRateAllow},
	{Name: xrateName, Config: "rate.Limiter.Allow, same rate, in this process: no Redis", New: xrateAllow},
}

// RateMultiLibs wait for one event of waitRate per Locker call, in the
// workers of RateScenario (x/time/rate: RateScenarioOneProc).
var RateMultiLibs = []MultiLib{
	{Lib: Lib{Name: "redsem RateLimit", Config: "RateLimit.Wait: reserve a time, sleep until it (one call per event)",
		New: redsemWaitRate}, Rate: true},
	{Lib: Lib{Name: "redis_rate", Config: "Limiter.Allow; when refused, sleep RetryAfter and ask again",
		New: redisRatePoll}, Rate: true},
	{Lib: Lib{Name: xrateName, Config: "rate.Limiter.Wait, one limiter shared by the process's 32 goroutines (no Redis)",
		New: xrateWait}, Rate: true, OneProcess: true},
}

// xrates are this process's x/time/rate limiters by name: the goroutines
// of a worker (each with a Locker of its own) share one.
var xrates sync.Map

func xrateLimiter(key string, r limiter.Rate) *rate.Limiter {
	l, _ := xrates.LoadOrStore(key, rate.NewLimiter(rate.Limit(float64(r.Events)/r.Per.Seconds()), int(r.Burst)))
	return l.(*rate.Limiter)
}

func xrateAllow(_ *Proc, key string) (Locker, error) {
	l := xrateLimiter(key, allowRate)
	return func(context.Context) (Unlock, error) {
		if !l.Allow() {
			return nil, errRefused
		}
		return noUnlock, nil
	}, nil
}

// xrateWait waits with rate.Limiter.Wait, which (as redsem's) reserves
// nothing past ctx's deadline, the end of the run: the goroutine then
// sleeps to the end.
func xrateWait(_ *Proc, key string) (Locker, error) {
	l := xrateLimiter(key, waitRate)
	return func(ctx context.Context) (Unlock, error) {
		if err := l.Wait(ctx); err != nil {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return noUnlock, nil
	}, nil
}

// noUnlock is the Unlock of an event: there is nothing to give back.
func noUnlock(context.Context) error { return nil }

var errRefused = errors.New("refused below the rate")

func redsemAllow(p *Proc, key string) (Locker, error) {
	rl, err := redsemRate(p, key, allowRate)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (Unlock, error) {
		ok, err := rl.Allow(ctx)
		if err == nil && !ok {
			err = errRefused
		}
		return noUnlock, err
	}, nil
}

func redisRateAllow(p *Proc, key string) (Locker, error) {
	l, lim := redis_rate.NewLimiter(p.RDB), peerLimit(allowRate)
	return func(ctx context.Context) (Unlock, error) {
		res, err := l.Allow(ctx, key, lim)
		if err == nil && res.Allowed == 0 {
			err = errRefused
		}
		return noUnlock, err
	}, nil
}

// redsemWaitRate waits for its event with RateLimit.Wait, bounded only
// by ctx (the end of the run): a time past it is not reserved, and the
// goroutine sleeps to the end instead of asking again.
func redsemWaitRate(p *Proc, key string) (Locker, error) {
	rl, err := redsemRate(p, key, waitRate, limiter.AcquireTimeout(0))
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (Unlock, error) {
		err := rl.Wait(ctx)
		if errors.Is(err, limiter.ErrBusy) {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return noUnlock, err
	}, nil
}

// redisRatePoll asks until allowed, sleeping RetryAfter between tries, as
// redis_rate's README shows a caller waiting.
func redisRatePoll(p *Proc, key string) (Locker, error) {
	l, lim := redis_rate.NewLimiter(p.RDB), peerLimit(waitRate)
	return func(ctx context.Context) (Unlock, error) {
		for {
			res, err := l.Allow(ctx, key, lim)
			if err != nil {
				return nil, err
			}
			if res.Allowed > 0 {
				return noUnlock, nil
			}
			t := time.NewTimer(res.RetryAfter)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
	}, nil
}

func redsemRate(p *Proc, key string, r limiter.Rate, opts ...limiter.NameOption) (*limiter.RateLimit, error) {
	c, err := p.Limiter()
	if err != nil {
		return nil, err
	}
	return c.RateLimit(key, r, opts...)
}

// peerLimit is r as redis_rate spells it.
func peerLimit(r limiter.Rate) redis_rate.Limit {
	return redis_rate.Limit{Rate: int(r.Events), Burst: int(r.Burst), Period: r.Per}
}

// AllowResult is one uncontended run: timeOps' Result and redis-server's
// CPU time over the timed calls.
type AllowResult struct {
	Result
	CPUUsec int64
}

func (r AllowResult) CPUPerCall() float64 { return float64(r.CPUUsec) / float64(max(r.N, 1)) }

// RunAllow times n Allow calls of lib from one goroutine (timeOps), with
// INFO cpu read right around the timed loop.
func RunAllow(ctx context.Context, e *Env, lib Lib, n int) (AllowResult, error) {
	var before, after int64
	var cpuErr error
	read := func(dst *int64) func() {
		return func() {
			v, err := e.cpuUsec(ctx)
			*dst, cpuErr = v, errors.Join(cpuErr, err)
		}
	}
	r, err := timeOps(ctx, e, lib, e.key("allow-"+lib.Name), "uncontended Allow", n, Timer{Start: read(&before), Stop: read(&after)},
		func(lock Locker) error { _, err := lock(ctx); return err })
	if err == nil {
		err = cpuErr
	}
	return AllowResult{Result: r, CPUUsec: after - before}, err
}

// RunRateMulti runs RateScenario with lib in worker processes (o.Procs
// of them if set), or RateScenarioOneProc in one for a OneProcess lib.
func RunRateMulti(ctx context.Context, e *Env, lib MultiLib, o MultiOpts) (MultiRun, error) {
	if lib.OneProcess {
		o.Procs = 1
		return RunMulti(ctx, e, RateScenarioOneProc, lib, o)
	}
	return RunMulti(ctx, e, RateScenario, lib, o)
}

// grants are the run's grant times (Unix ns), sorted: the workers time an
// event when its call returned, on the machine's one clock.
func (r MultiRun) grants() []int64 {
	var ts []int64
	for _, rep := range r.Reports {
		for _, a := range rep.Acqs {
			ts = append(ts, a.Got)
		}
	}
	slices.Sort(ts)
	return ts
}

// Lateness is each event's time less its time on the rate's own schedule,
// in the order of the grants: the first Burst events at the first event,
// then one every Per/Events (event k at first + (k-Burst+1)·Per/Events).
// The goroutines all ask at the start and keep asking faster than the
// rate, so a perfect limiter would grant on that schedule exactly; a late
// event is time the rate lost, an early one would be over it. The
// schedule starts at the first event, as the limiter's does (redsem's and
// redis_rate's at the first call's arrival in Redis): FirstDelay is how
// long after the run's start that was.
func (r MultiRun) Lateness(rate limiter.Rate) []time.Duration {
	ts := r.grants()
	interval := float64(rate.Per) / float64(rate.Events)
	out := make([]time.Duration, len(ts))
	for k, t := range ts {
		ideal := ts[0] + int64(float64(max(int64(k)-rate.Burst+1, 0))*interval)
		out[k] = time.Duration(t - ideal)
	}
	return out
}

// FirstDelay is the first event's time after the run's start.
func (r MultiRun) FirstDelay() time.Duration {
	if ts := r.grants(); len(ts) > 0 {
		return time.Duration(ts[0] - r.Start)
	}
	return 0
}

// OverWindows counts the windows [t, t+w] starting at a grant that hold
// more than Burst + Events·w/Per grants: 0 when the rate held. The grants
// are timed by the workers after the call returned, so a late reply can
// make an event look closer to the next one than it was.
func (r MultiRun) OverWindows(rate limiter.Rate, w time.Duration) int {
	ts := r.grants()
	allowed := float64(rate.Burst) + float64(rate.Events)*float64(w)/float64(rate.Per)
	over, j := 0, 0
	for i := range ts {
		for j < len(ts) && ts[j] <= ts[i]+int64(w) {
			j++
		}
		if float64(j-i) > allowed {
			over++
		}
	}
	return over
}
