package httplimit

import (
	"context"
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
// (limiter.Reservation.Wait) and fails with the context's cause.
//
// A permit that came more than limiter.Lateness after the slot is not
// used with that slot: the request would bunch with the ones reserved
// after it (several slots 100ms apart whose permit frees at once would
// all be sent together). limiter.Reservation.Renew takes an event now
// instead when the rate has room; when it has none, the permit is given
// back and the request reserves anew with what is left of
// AcquireTimeout, or fails with the rate's *limiter.BusyError when its
// next slot is further off than that.
func (c *common) pass(ctx context.Context, name string, g gate, opts ...limiter.AcquireOption) (*limiter.Lease, error) {
	start := time.Now()
	rl, sem, try := g.rl, g.sem, c.acquireTimeout < 0
	left := c.acquireTimeout
	for again := false; ; again = true {
		var res *limiter.Reservation
		if rl != nil {
			var err error
			if res, err = rl.ReserveN(ctx, 1); err != nil {
				return nil, err
			}
			slept := res.Delay() > 0
			if err := res.Wait(ctx); err != nil { // ErrClosed too
				return nil, err
			}
			if slept || again {
				// The permit's wait gets what is left of AcquireTimeout.
				left = c.acquireTimeout - time.Since(start)
				try = left <= 0
			}
		}
		if sem == nil {
			return nil, nil
		}
		var lease *limiter.Lease
		var err error
		if try {
			lease, err = sem.TryAcquire(ctx, opts...)
		} else {
			lease, err = sem.Acquire(ctx, append(opts[:len(opts):len(opts)], limiter.MaxWait(left))...)
		}
		if err != nil || res == nil {
			return lease, err
		}
		ok, err := res.Renew(ctx)
		if ok {
			return lease, nil
		}
		// Late, and no room now (or Redis failed): give the permit back
		// before waiting again.
		if rerr := lease.Release(ctx); rerr != nil {
			c.logger.Warn("httplimit: release failed", "semaphore", name, "id", lease.ID(),
				"then", "permit comes back at the lease TTL", "err", rerr)
		}
		if err != nil {
			return nil, err
		}
		if rl, err = c.gates.rateLimit(name, c.acquireTimeout-time.Since(start)); err != nil {
			return nil, err
		}
	}
}

// rateLimit returns the rate limit of name for a request that reserves
// anew with left of AcquireTimeout: it gives a slot at most left off
// (only one that is now when left is not above 0). It sends nothing to
// Redis; after the Client's Close it gives limiter.ErrClosed.
func (s *gates) rateLimit(name string, left time.Duration) (*limiter.RateLimit, error) {
	opts := append(s.rateOpts[:len(s.rateOpts):len(s.rateOpts)], limiter.AcquireTimeout(max(left, time.Nanosecond)))
	return s.client.RateLimit(name, s.rate, opts...)
}
