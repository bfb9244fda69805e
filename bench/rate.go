package main

// Rate scenarios: redsem's RateLimit beside go-redis/redis_rate, both
// GCRA in one Lua script per call. redsem reserves a time and the caller
// sleeps until it; redis_rate answers "not now, retry after X", so a
// waiter polls, as its README's Allow loop does. Two scenarios:
// uncontended Allow (one goroutine, a rate it never reaches) and waiters
// on one name in several processes at a rate below their demand
// (multiproc.go's workers, a rate Lib in place of a lock).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/redsem/redsem/limiter"
)

var (
	// allowRate is the uncontended scenario's rate: never reached, so
	// every Allow is granted and both libraries run their whole script.
	allowRate = limiter.Rate{Events: 1_000_000, Per: time.Second, Burst: 1_000_000}
	// waitRate is the contended scenario's rate, below the demand of
	// RateScenario's goroutines (each asks again as soon as it got one).
	waitRate = limiter.Rate{Events: 200, Per: time.Second, Burst: 10}
)

// RateScenario: 4 processes x 8 goroutines wait for events on one name.
// Limit is huge: the lock analysis (peak holders, violations) does not
// apply to a rate.
var RateScenario = MultiScenario{Name: fmt.Sprintf("rate %s, 4 procs x 8 waiting", waitRate), Procs: 4, Goroutines: 8, Limit: 1 << 40}

// AllowLibs make one Allow per Locker call on allowRate; a refusal is an
// error (it must not happen).
var AllowLibs = []Lib{
	{Name: "redsem", Config: "RateLimit.Allow, " + allowRate.String() + "; one FCALL", New: redsemAllow},
	{Name: "redis_rate", Config: "Limiter.Allow, same rate; one EVALSHA", New: redisRateAllow},
}

// RateMultiLibs wait for one event of waitRate per Locker call, in the
// workers of RateScenario.
var RateMultiLibs = []MultiLib{
	{Lib: Lib{Name: "redsem RateLimit", Config: "RateLimit.Wait: reserve a time, sleep until it (one call per event)",
		New: redsemWaitRate}, Rate: true},
	{Lib: Lib{Name: "redis_rate", Config: "Limiter.Allow; when refused, sleep RetryAfter and ask again",
		New: redisRatePoll}, Rate: true},
	{Lib: Lib{Name: "floor: paced PING", Config: "no limiter: each goroutine sleeps 32/200 s, then PINGs once (the rate's calls, spread out as redsem's)",
		New: pacedPing}, Rate: true},
}

// pacedPing is the floor under a rate limiter's cost at this rate: one
// PING per event, the events spread out as a limiter spreads them (each
// goroutine starts at a random point of its period), so that Redis wakes
// up about as often, from idle, with cold caches.
func pacedPing(p *Proc, _ string) (Locker, error) {
	every := time.Duration(RateScenario.Goroutines*RateScenario.Procs) * waitRate.Per / time.Duration(waitRate.Events)
	next := time.Now().Add(rand.N(every))
	return func(ctx context.Context) (Unlock, error) {
		t := time.NewTimer(time.Until(next))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		next = next.Add(every)
		return noUnlock, p.RDB.Ping(ctx).Err()
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

func redsemRate(p *Proc, key string, r limiter.Rate, opts ...limiter.Option) (*limiter.RateLimit, error) {
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

// RunRateMulti runs RateScenario with lib in worker processes.
func RunRateMulti(ctx context.Context, e *Env, lib MultiLib, o MultiOpts) (MultiRun, error) {
	return RunMulti(ctx, e, RateScenario, lib, o)
}

// OverRate is the most events granted in any window beyond what r allows
// in it (Burst + Events·w/Per), from the merged grant times: 0 when the
// rate held. The grants are timed by the workers after the call returned,
// so a small excess can be timing noise.
func (r MultiRun) OverRate(rate limiter.Rate) float64 {
	var ts []int64
	for _, rep := range r.Reports {
		for _, a := range rep.Acqs {
			ts = append(ts, a.Got)
		}
	}
	slices.Sort(ts)
	perNs := float64(rate.Events) / float64(rate.Per)
	worst := 0.0
	for i := range ts {
		for j := i; j < len(ts); j++ {
			worst = max(worst, float64(j-i+1)-float64(rate.Burst)-perNs*float64(ts[j]-ts[i]))
		}
	}
	return worst
}
