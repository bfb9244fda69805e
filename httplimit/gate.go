package httplimit

import (
	"context"
	"fmt"
	"time"

	"github.com/redsem/redsem/limiter"
)

// pass lets a request through its gate: first its rate slot (an event of
// cost 1), then its permit, so that no permit is held while a request
// sleeps until its slot (a permit held then would idle, and hold back
// requests whose slots came). Both come out of the one AcquireTimeout:
// the permit may wait only what the slot left of it. It returns the
// lease, nil when the gate has no semaphore.
//
// The rate's event is counted once its slot is reserved: a request that
// then gets no permit (busy, cancelled, a Redis failure) has spent it, so
// the rate is never exceeded, at the price of a slot unused. A request
// whose context ends while it sleeps gives its slot back where it can
// (limiter.Reservation.Cancel: nothing was reserved after it) and fails
// with the context's cause.
func (c *common) pass(ctx context.Context, name string, g gate, opts ...limiter.AcquireOption) (*limiter.Lease, error) {
	start := time.Now()
	sem, try := g.sem, c.acquireTimeout < 0
	if g.rl != nil {
		slept, err := sleepUntilSlot(ctx, g.rl)
		if err != nil {
			return nil, err
		}
		if slept {
			// The Client may have closed while we slept, and the permit's
			// wait gets what is left of AcquireTimeout.
			left := c.acquireTimeout - time.Since(start)
			if sem, err = c.gates.afterSleep(name, left); err != nil {
				return nil, err
			}
			try = left <= 0
		}
	}
	if sem == nil {
		return nil, nil
	}
	if try {
		return sem.TryAcquire(ctx, opts...)
	}
	return sem.Acquire(ctx, opts...)
}

// sleepUntilSlot reserves a slot of rl within the rate limit's wait bound
// (AcquireTimeout and ctx's deadline) and sleeps until it; it reports
// whether it slept. A slot further off than the bound gives the rate's
// *limiter.BusyError (RetryIn the wait; Paused when a pause is why) at
// once, reserving nothing.
func sleepUntilSlot(ctx context.Context, rl *limiter.RateLimit) (bool, error) {
	r, err := rl.ReserveN(ctx, 1)
	if err != nil {
		return false, err
	}
	d := r.Delay()
	if d == 0 {
		return false, nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true, nil
	case <-ctx.Done():
		// Cancel detaches from ctx and is bounded by ReleaseTimeout; a
		// slot it cannot give back is merely unused.
		_, _ = r.Cancel(ctx)
		return false, fmt.Errorf("waiting for a rate slot of %q: %w", rl.Name(), context.Cause(ctx))
	}
}

// afterSleep returns the semaphore of name to wait for after a rate
// sleep, with left of AcquireTimeout (nil without a semaphore), or
// limiter.ErrClosed when the Client closed during the sleep. Neither
// sends anything to Redis.
func (s *gates) afterSleep(name string, left time.Duration) (*limiter.Semaphore, error) {
	if s.limit == 0 {
		_, err := s.client.RateLimit(name, s.rate, s.rateOpts...)
		return nil, err
	}
	if left <= 0 {
		return s.semaphore(name) // TryAcquire: no wait is left
	}
	return s.semaphore(name, limiter.AcquireTimeout(left))
}
