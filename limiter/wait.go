package limiter

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// maxFallbackWait caps how long the head waiter sleeps without a wake-up
// (it polls for leases that expire rather than being released).
const maxFallbackWait = 2 * time.Second

var errAcquireTimeout = errors.New("acquire timeout")

// waiting is one Acquire's wait. The waiter joins the semaphore's queue in
// Redis with its first attempt and is woken by the release (or the
// departure) that makes room for it, in any process. Only the waiter at
// the head also sets a timer, for leases that expire without a release;
// the others rely on the wake-up, and on the refresher's keep-alive of
// their queue entry, which also reports a turn whose wake-up was lost.
type waiting struct {
	s      *Semaphore
	r      store.AcquireRequest
	w      *waiter
	parent context.Context // the caller's
	ctx    context.Context // parent, bounded by bound
	bound  time.Duration   // AcquireTimeout, or the call's MaxWait
	// attemptCtx bounds an attempt: one in flight when AcquireTimeout
	// runs out may finish, for up to NodeTimeout more, since a slow Redis
	// is not a full semaphore and a grant that arrives is used rather
	// than thrown away.
	attemptCtx context.Context
	start      time.Time
	attempts   int
	answered   bool               // Redis answered an attempt
	rep        store.AcquireReply // its last answer
	answeredAt time.Time          // when that answer arrived
	// told: rep's timer is a head notice's (see woken), newer than the
	// answer, whose InUse it keeps.
	told       bool
	splits     int  // answers that were a quorum's split votes
	subscribed bool // wake-ups arrive (else: timers only)
	// queued: the waiter is in the queue, kept alive by the refresher.
	// unsure: an attempt failed without an answer, so it may have queued
	// the waiter (or Redis may have granted it a lease since).
	queued, unsure bool
	timer          *time.Timer // only the head waiter needs one
}

// wait is Acquire's loop: an attempt, then a sleep until a wake-up, the
// head's timer, or the end of the wait.
// bound is AcquireTimeout's or MaxWait's (0: none).
func (s *Semaphore) wait(ctx context.Context, r store.AcquireRequest, bound time.Duration, start time.Time) (*Lease, error) {
	wt := &waiting{s: s, r: r, parent: ctx, ctx: ctx, attemptCtx: ctx, bound: bound, start: start, subscribed: true}
	if bound > 0 {
		var cancel, cancelAttempt context.CancelFunc
		wt.ctx, cancel = context.WithTimeoutCause(ctx, bound, errAcquireTimeout)
		defer cancel()
		wt.attemptCtx, cancelAttempt = context.WithTimeoutCause(ctx, bound+s.cfg.nodeWait(), errAcquireTimeout)
		defer cancelAttempt()
	}
	shard, err := s.c.hub.ready(wt.attemptCtx, s)
	wt.join(shard)
	defer wt.finish()
	if err != nil {
		if wt.attemptCtx.Err() != nil || errors.Is(err, ErrClosed) {
			return nil, wt.gaveUp(err)
		}
		wt.subscribed = false
		s.cfg.logger.Warn("redsem: cannot subscribe for wake-ups; waiting on timers", "name", s.name, "err", err)
	}
	for {
		l, err, next := wt.try()
		if next == retry {
			continue
		}
		for next == sleep {
			l, err, next = wt.sleep()
		}
		if next == done {
			return l, err
		}
	}
}

// step is what the wait does after an attempt or a sleep.
type step int

const (
	done  step = iota // the wait is over, with a lease or an error
	sleep             // queued: sleep until woken
	retry             // try again now
)

// join registers the waiter, once its wake channel is readied (shard: see
// hub.ready) and before its first attempt, so that a wake-up arriving
// before that attempt's reply is kept (registered earlier, it would take
// the signal every waiter gets when the subscription first comes up, for
// a lost wake-up, and try twice). A release may grant the lease to this
// waiter directly when the lease id is the wait id and the
// refresher will extend the shorter life such a grant has (see
// takeGrant). A TTL shorter than the queue entry's would often end before
// the grant arrived, since the waiter's keep-alives are QueueTTL/3 apart.
// With WaitReplicas the waiter acquires itself: a grant made by another
// Client's release is one it cannot confirm on the replicas.
func (wt *waiting) join(shard string) {
	s, c := wt.s, wt.s.c
	waitID := wt.r.ID // made up, so unique; a given id may be asked for twice
	if wt.r.IDGiven {
		waitID = c.newID()
	}
	wt.w = c.hub.join(s, waitID, shard)
	wt.r.Wait, wt.r.Channel = wt.w.id, wt.w.channel()
	wt.r.DirectGrant = !wt.r.IDGiven && s.cfg.refresh > 0 && s.cfg.ttl >= store.QueueTTL && c.st.GrantsDirectly() && !s.cfg.replicas.On()
}

// finish takes the waiter out of this Client, and out of the queue when
// it may be there.
func (wt *waiting) finish() {
	if wt.timer != nil {
		wt.timer.Stop()
	}
	wt.w.leave()
	switch {
	case wt.queued:
		wt.s.leave(wt.w.id)
	case wt.unsure:
		// In the background: Redis is failing, and the caller should
		// hear of it now. The entry would expire in QueueTTL anyway.
		wt.s.c.spawn(func() { wt.s.leave(wt.w.id) })
	}
}

// try makes one attempt.
func (wt *waiting) try() (l *Lease, err error, next step) {
	s, c := wt.s, wt.s.c
	wt.attempts++
	if wt.attempts > 1 && !wt.r.IDGiven && !c.st.GrantsDirectly() {
		// A quorum attempt that failed is rolled back, on nodes whose
		// answer was lost by any token of its id, in the background: the
		// next attempt takes another id, so that rollback can never
		// remove what it is granted.
		wt.r.ID = wt.r.IDPrefix + c.newID()
	}
	sent := time.Now()
	l, wt.rep, err = s.attempt(wt.attemptCtx, wt.r)
	if err != nil && !wt.queued {
		wt.unsure = true
	}
	switch {
	case err != nil && wt.attemptCtx.Err() != nil:
		return nil, wt.gaveUp(nil), done
	case errors.Is(err, errReplyLate):
		// Granted (which took it out of the queue), but the reply came
		// after the lease's local deadline and the grant was given back:
		// the permits were free, so try again at once, within the bound.
		wt.queued, wt.unsure = false, false
		if wt.ctx.Err() != nil {
			return nil, wt.gaveUp(nil), done
		}
		return nil, nil, retry
	case err != nil && errors.As(err, new(*QuorumError)) && wt.ctx.Done() != nil:
		// A quorum that failed may come back (a node slow, restarting or
		// failing over): try again while AcquireTimeout and ctx allow,
		// and report this failure if they run out. A single Redis's
		// failure is returned at once.
		if !s.pause(wt.ctx, s.cfg.nodeWait()) {
			return nil, err, done
		}
		return nil, nil, retry
	case err != nil:
		return nil, err, done
	case l != nil:
		wt.queued = false // the grant took it out of the queue
		return l, nil, done
	}
	wt.answered, wt.answeredAt, wt.told = true, time.Now(), false
	wt.w.queued(sent, wt.rep.LastToken)
	if wt.ctx.Err() != nil { // the answer came after AcquireTimeout: full
		return nil, wt.gaveUp(nil), done
	}
	if !wt.queued {
		wt.queued = true
		wt.w.keepAlive()
	}
	return nil, nil, sleep
}

// sleep waits for a wake-up (taking a direct grant it brings), the head's
// timer, or the end of the wait.
func (wt *waiting) sleep() (l *Lease, err error, next step) {
	c := wt.s.c
	var fallback <-chan time.Time
	if wt.rep.Head || !wt.subscribed {
		d := wt.retryAfter()
		if wt.timer == nil {
			wt.timer = time.NewTimer(d)
		} else {
			wt.timer.Reset(d)
		}
		fallback = wt.timer.C
	}
	defer func() {
		if fallback != nil && !wt.timer.Stop() {
			select {
			case <-wt.timer.C:
			default:
			}
		}
	}()
	select {
	case <-wt.w.wake:
		return wt.woken()
	case <-fallback:
		return nil, nil, retry
	case <-wt.ctx.Done():
		return wt.timedOut()
	case <-c.ctx.Done():
		return nil, wt.gaveUp(ErrClosed), done
	}
}

// woken takes the lease a release granted the waiter directly, if any.
func (wt *waiting) woken() (l *Lease, err error, next step) {
	s := wt.s
	if token, after := wt.w.grant(); token != "" {
		if wt.ctx.Err() != nil {
			// The caller gave up as it was granted the lease (select picks
			// either): give it back, passing the turn on.
			s.forget(wt.r.ID, token)
			wt.queued = false
			return nil, wt.gaveUp(nil), done
		}
		l, err := s.takeGrant(wt.attemptCtx, wt.r, token, after)
		switch {
		case err == nil:
			wt.queued = false // the grant took it out of the queue
			return l, nil, done
		case errors.Is(err, ErrClosed):
			return nil, wt.gaveUp(ErrClosed), done
		}
		// Too late for its local deadline, and given back: the next
		// attempt queues again.
	}
	if wt.ctx.Err() != nil { // AcquireTimeout ended as it was woken
		return wt.timedOut()
	}
	if at, ok := wt.w.madeHeadOnly(); ok {
		// The head left the queue, and this waiter, which did not fit,
		// is the head now: the timer for the expiry ahead is its own.
		wt.rep.Head, wt.rep.Split, wt.rep.Restarted, wt.rep.Paused = true, false, false, false
		wt.rep.RetryIn, wt.answeredAt, wt.told = max(time.Until(at), 0), time.Now(), true
		return nil, nil, sleep
	}
	return nil, nil, retry
}

// timedOut ends a wait whose ctx ended while it slept. When the wait's own
// bound ended it and the last answer is stale, one more attempt asks Redis
// how things stand, so that the error tells what blocked the wait when it
// gave up: a waiter behind others sleeps until woken, past the quarantine
// or the expiry its last answer announced, and its error said "grants
// nothing new for 0s" seconds after the quarantine had ended. A grant that
// attempt brings is the wait's lease, as an attempt in flight at the
// timeout would be (attemptCtx allows NodeTimeout more for it).
func (wt *waiting) timedOut() (l *Lease, err error, next step) {
	if !wt.answered || !wt.ownTimeout() || !wt.stale() {
		return nil, wt.gaveUp(nil), done
	}
	s, c := wt.s, wt.s.c
	wt.attempts++
	if !wt.r.IDGiven && !c.st.GrantsDirectly() {
		wt.r.ID = wt.r.IDPrefix + c.newID() // as in try: a quorum's failed attempt is rolled back by id
	}
	sent := time.Now()
	l, rep, err := s.attempt(wt.attemptCtx, wt.r)
	switch {
	case err == nil && l != nil:
		wt.queued = false // the grant took it out of the queue
		return l, nil, done
	case err == nil:
		wt.rep, wt.answeredAt, wt.told = rep, time.Now(), false
		wt.w.queued(sent, rep.LastToken)
	default:
		// The last answer stands, with the time since (busy counts it).
		s.cfg.logger.Debug("redsem: the last look of a wait that timed out failed", "name", s.name, "err", err)
	}
	return nil, wt.gaveUp(nil), done
}

// ownTimeout: the wait's own bound (AcquireTimeout, MaxWait) ended it,
// not the caller's ctx.
func (wt *waiting) ownTimeout() bool {
	return wt.parent.Err() == nil && errors.Is(context.Cause(wt.ctx), errAcquireTimeout)
}

// stale: what the last answer said blocked the wait (a quarantine, a
// pause, the earliest expiry) has run out since, or a head notice came
// after it.
func (wt *waiting) stale() bool {
	if wt.told {
		return true
	}
	left := wt.rep.RetryIn
	if wt.rep.Restarted {
		left = wt.rep.Quarantine
	}
	return time.Since(wt.answeredAt) >= left
}

// gaveUp reports why a wait ended: our own timeout (busy only if Redis
// answered at all), the Client's Close, or the caller's ctx.
func (wt *waiting) gaveUp(err error) error {
	s := wt.s
	ownTimeout := wt.ownTimeout()
	switch {
	case errors.Is(err, ErrClosed):
		return fmt.Errorf("limiter: acquire %q: %w", s.name, ErrClosed)
	case ownTimeout && !wt.answered:
		return fmt.Errorf("limiter: acquire %q: %w: Redis did not answer within the wait's bound %v (and NodeTimeout %v more)",
			s.name, ErrTimeout, wt.bound, s.cfg.nodeWait())
	case ownTimeout:
		return s.busy(wt.r, wt.rep, wt.answeredAt, wt.attempts, time.Since(wt.start), true)
	}
	return fmt.Errorf("limiter: acquire %q: %w", s.name, context.Cause(wt.parent))
}

// takeGrant makes the lease a release granted directly to the waiter of
// r, with token. Redis keeps it at least until the waiter's queue entry
// would have expired, QueueTTL after its last request answered "queued"
// (sent at after), or its TTL if shorter; the refresher extends it about
// 2s later (a short hold ends first), so a Redis outage in those seconds
// ends it sooner than an acquired lease. A lease that cannot be used (its
// local deadline passed, the Client closing) is given back.
func (s *Semaphore) takeGrant(ctx context.Context, r store.AcquireRequest, token string, after time.Time) (*Lease, error) {
	rep := store.AcquireReply{Granted: true, Token: token, Weight: r.Weight}
	return s.adopt(ctx, "acquire", r.ID, false, rep, after, min(s.cfg.ttl, store.QueueTTL))
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
	woken, err := bounded(s.c, ctx, func() ([]string, error) { return s.c.st.Leave(ctx, s.keys, wait, s.c.hub.channel(s.wake)) })
	if err != nil {
		// The entry expires by itself within QueueTTL.
		s.cfg.logger.Debug("redsem: leaving the queue failed", "name", s.name, "err", err)
	}
	s.c.hub.wake(woken)
}

// retryAfter is how long the head waiter sleeps without a wake-up: until
// the name's pause or the restart quarantine ends, about the earliest
// expiry, or, after a quorum's
// split vote, the pause
// the quorum proposed the first time, then a growing one (1ms doubling,
// at most NodeTimeout/2): what looks like a split may be a holder missing
// from one node (it acquired while that node was down), which lasts
// until its refresh grants it there again, and must not be retried in a
// loop.
func (wt *waiting) retryAfter() time.Duration {
	// Until a pause's or the restart quarantine's end, however long: no
	// polling, and no jitter, which made the first grant after a
	// quarantine come up to a fifth of it late. (A quorum's reply may
	// carry an earlier expiry than a restarted node's quarantine: that
	// one polls as below.)
	if wt.rep.Paused || wt.rep.Restarted && !wt.rep.Split && wt.rep.RetryIn >= wt.rep.Quarantine {
		return wt.rep.RetryIn + time.Millisecond
	}
	if !wt.rep.Split {
		return fallbackWait(wt.rep.RetryIn)
	}
	wt.splits++
	if wt.splits == 1 {
		return wt.rep.SplitPause
	}
	back := min(time.Millisecond<<min(wt.splits, 16), wt.s.cfg.nodeWait()/2)
	return max(wt.rep.SplitPause, back) + rand.N(back/2+1)
}

func fallbackWait(retryIn time.Duration) time.Duration {
	d := min(retryIn, maxFallbackWait) + time.Millisecond
	return d + rand.N(d/5+1)
}
