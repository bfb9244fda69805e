package limiter

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// maxFallbackWait caps how long the head waiter sleeps without a wake-up
// (it polls for leases that expire rather than being released).
const maxFallbackWait = 2 * time.Second

var errAcquireTimeout = errors.New("acquire timeout")

// wait is Acquire's loop. The waiter joins the semaphore's queue in Redis
// with its first attempt and is woken by the release (or the departure)
// that makes room for it, in any process. Only the waiter at the head
// also sets a timer, for leases that expire without a release; the
// others rely on the wake-up, and on the refresher's keep-alive of their
// queue entry, which also reports a turn whose wake-up was lost.
func (s *Semaphore) wait(ctx context.Context, r acquireRequest, start time.Time) (*Lease, error) {
	parent := ctx
	// An attempt in flight when AcquireTimeout runs out may finish, for up
	// to NodeTimeout more: a slow Redis is not a full semaphore, and a
	// grant that arrives is used rather than thrown away.
	attemptCtx := ctx
	if s.cfg.acquireTimeout > 0 {
		var cancel, cancelAttempt context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.cfg.acquireTimeout, errAcquireTimeout)
		defer cancel()
		attemptCtx, cancelAttempt = context.WithTimeoutCause(parent, s.cfg.acquireTimeout+s.cfg.nodeWait(), errAcquireTimeout)
		defer cancelAttempt()
	}
	answered := false // has Redis answered any attempt
	c := s.c
	subscribed := true
	if err := c.hub.ready(attemptCtx); err != nil {
		if attemptCtx.Err() != nil || errors.Is(err, ErrClosed) {
			return nil, s.gaveUp(parent, ctx, r, acquireReply{}, 0, false, start, err)
		}
		subscribed = false
		s.cfg.logger.Warn("redsem: cannot subscribe for wake-ups; waiting on timers", "name", s.name, "err", err)
	}
	waitID := r.id // made up, so unique; a given id may be asked for twice
	if r.idGiven {
		waitID = c.newID()
	}
	w := c.hub.add(s, waitID)
	r.wait = w.id
	// A release may grant the lease to this waiter directly when the
	// lease id is the wait id and the refresher will extend the shorter
	// life such a grant has (see takeHandoff). A TTL shorter than the
	// queue entry's would often end before the handoff arrived, since the
	// waiter's keep-alives are queueTTL/3 apart. With WaitReplicas the
	// waiter acquires itself: a grant made by another Client's release
	// is one it cannot confirm on the replicas.
	r.handoff = !r.idGiven && s.cfg.refresh > 0 && s.cfg.ttl >= queueTTL && c.st.handsOver() && !s.cfg.replicas.on()
	queued := false
	// unsure: an attempt failed without an answer, so it may have queued
	// the waiter (or Redis may have handed it a lease since).
	unsure := false
	defer func() {
		c.refresher.remove(w)
		c.hub.remove(w)
		switch {
		case queued:
			s.leave(w.id)
		case unsure:
			// In the background: Redis is failing, and the caller should
			// hear of it now. The entry would expire in queueTTL anyway.
			c.spawn(func() { s.leave(w.id) })
		}
	}()
	var timer *time.Timer // only the head waiter needs one
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()

	for attempt := 1; ; attempt++ {
		if attempt > 1 && !r.idGiven && !c.st.handsOver() {
			// A quorum attempt that failed is rolled back, on nodes whose
			// answer was lost by any token of its id, in the background:
			// the next attempt takes another id, so that rollback can
			// never remove what it is granted.
			r.id = c.newID()
		}
		sent := time.Now()
		l, rep, err := s.attempt(attemptCtx, r)
		if err != nil && !queued {
			unsure = true
		}
		switch {
		case err != nil && attemptCtx.Err() != nil:
			return nil, s.gaveUp(parent, ctx, r, rep, attempt, answered, start, nil)
		case err != nil && errors.As(err, new(*QuorumError)) && ctx.Done() != nil:
			// A quorum that failed may come back (a node slow, restarting
			// or failing over): try again while AcquireTimeout and ctx
			// allow, and report this failure if they run out. A single
			// Redis's failure is returned at once.
			if !s.pause(ctx, s.cfg.nodeWait()) {
				return nil, err
			}
			continue
		case err != nil:
			return nil, err
		case l != nil:
			queued = false // the grant took it out of the queue
			return l, nil
		}
		answered = true
		w.queued(sent, rep.lastToken)
		if ctx.Err() != nil { // the answer came after AcquireTimeout: full
			return nil, s.gaveUp(parent, ctx, r, rep, attempt, answered, start, nil)
		}
		if !queued {
			queued = true
			c.refresher.addWaiter(w)
		}
		if s.cfg.attempts > 0 && attempt >= s.cfg.attempts {
			return nil, s.busy(r, rep, attempt, time.Since(start), true)
		}
		var fallback <-chan time.Time
		if rep.head || !subscribed {
			if timer == nil {
				timer = time.NewTimer(fallbackWait(rep.retryIn))
			} else {
				timer.Reset(fallbackWait(rep.retryIn))
			}
			fallback = timer.C
		}
		select {
		case <-w.wake:
			if token, after := w.handoff(); token != "" {
				if ctx.Err() != nil {
					// The caller gave up as it was handed the lease (select
					// picks either): give it back, passing the turn on.
					s.forget(r.id, token)
					queued = false
					return nil, s.gaveUp(parent, ctx, r, rep, attempt, answered, start, nil)
				}
				l, err := s.takeHandoff(attemptCtx, r, token, after)
				switch {
				case err == nil:
					queued = false // the grant took it out of the queue
					return l, nil
				case errors.Is(err, ErrClosed):
					return nil, s.gaveUp(parent, ctx, r, rep, attempt, answered, start, ErrClosed)
				}
				// Too late for its local deadline, and given back: the
				// next attempt queues again.
			}
			if ctx.Err() != nil { // AcquireTimeout ended as it was woken
				return nil, s.gaveUp(parent, ctx, r, rep, attempt, answered, start, nil)
			}
		case <-fallback:
		case <-ctx.Done():
			return nil, s.gaveUp(parent, ctx, r, rep, attempt, answered, start, nil)
		case <-c.ctx.Done():
			return nil, s.gaveUp(parent, ctx, r, rep, attempt, answered, start, ErrClosed)
		}
		if fallback != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// takeHandoff makes the lease a release granted to the waiter of r with
// token. Redis keeps it at least until the waiter's queue entry would
// have expired, queueTTL after its last request answered "queued" (sent
// at after), or its TTL if shorter; the refresher extends it about 2s
// later (a short hold ends first), so a Redis outage in those seconds
// ends it sooner than an acquired lease. A lease that cannot be used (its
// local deadline passed, the Client closing) is given back.
func (s *Semaphore) takeHandoff(ctx context.Context, r acquireRequest, token string, after time.Time) (*Lease, error) {
	rep := acquireReply{granted: true, token: token, weight: r.weight}
	l, err := newLease(ctx, s, r.id, false, rep, after, min(s.cfg.ttl, queueTTL))
	if err != nil {
		s.forget(r.id, token)
		return nil, err
	}
	return l, nil
}

// pause waits d (with jitter, so that retrying clients spread out), and
// reports false when ctx or the Client ended first.
func (s *Semaphore) pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d + rand.N(d/2+1))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-s.c.ctx.Done():
	}
	return false
}

// leave takes a waiter that gave up out of the queue and passes its turn
// on, detached from the caller's context (which may be what ended).
func (s *Semaphore) leave(wait string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.releaseTimeout)
	defer cancel()
	woken, err := bounded(s.c, ctx, func() ([]string, error) { return s.c.st.leave(ctx, s.keys, wait, s.c.channel) })
	if err != nil {
		// The entry expires by itself within queueTTL.
		s.cfg.logger.Debug("redsem: leaving the queue failed", "name", s.name, "err", err)
	}
	s.c.hub.wake(woken)
}

// gaveUp reports why a wait ended: our own timeout (busy only if Redis
// answered at all), the Client's Close, or the caller's ctx.
func (s *Semaphore) gaveUp(parent, ctx context.Context, r acquireRequest, rep acquireReply, attempts int, answered bool, start time.Time, err error) error {
	switch {
	case errors.Is(err, ErrClosed):
		return fmt.Errorf("limiter: acquire %q: %w", s.name, ErrClosed)
	case parent.Err() == nil && !answered && errors.Is(context.Cause(ctx), errAcquireTimeout):
		return fmt.Errorf("limiter: acquire %q: %w: Redis did not answer within AcquireTimeout %v (and NodeTimeout %v more)",
			s.name, ErrTimeout, s.cfg.acquireTimeout, s.cfg.nodeWait())
	case parent.Err() == nil && errors.Is(context.Cause(ctx), errAcquireTimeout):
		return s.busy(r, rep, attempts, time.Since(start), true)
	}
	return fmt.Errorf("limiter: acquire %q: %w", s.name, context.Cause(parent))
}

func fallbackWait(retryIn time.Duration) time.Duration {
	d := min(retryIn, maxFallbackWait) + time.Millisecond
	return d + rand.N(d/5+1)
}
