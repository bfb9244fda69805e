package limiter

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// maxLimit keeps permit sums exact in Lua, whose numbers are doubles.
const maxLimit = 1 << 40

// maxFallbackWait caps how long a waiter sleeps without a wake message, so
// a lost message costs at most this much latency, never liveness.
const maxFallbackWait = 2 * time.Second

// Semaphore is a counting semaphore shared by every process that uses the
// same Redis and name: at most limit permits are held at once. Each
// acquisition is a Lease with its own TTL and fencing token. A Semaphore is
// safe for concurrent use.
//
// Processes may disagree on the limit; each acquisition is checked against
// the limit of the Semaphore that asks.
type Semaphore struct {
	name   string
	limit  int64
	cfg    config
	keys   keyspace
	st     store
	shared *shared
}

// Holder describes one live lease, as Redis sees it.
type Holder struct {
	ID     string
	Weight int64
	Token  int64
	TTL    time.Duration // until it expires unless refreshed
}

// NewSemaphore returns a semaphore of limit permits named name on rdb,
// which may be a plain, Sentinel failover or Cluster client. Invalid
// arguments give an *ArgumentError naming them. Nothing is sent to Redis.
func NewSemaphore(rdb redis.UniversalClient, name string, limit int64, opts ...Option) (*Semaphore, error) {
	if isNil(rdb) {
		return nil, argError("rdb", rdb, "must not be nil")
	}
	return newSemaphore(name, limit, opts, func(*config) store { return newRedisStore(rdb) })
}

// newSemaphore validates the arguments, then opens the store with the
// validated configuration.
func newSemaphore(name string, limit int64, opts []Option, open func(*config) store) (*Semaphore, error) {
	if name == "" {
		return nil, argError("name", `""`, "must not be empty")
	}
	if limit < 1 || limit > maxLimit {
		return nil, argError("limit", limit, fmt.Sprintf("must be between 1 and %d", int64(maxLimit)))
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	st := open(&cfg)
	return &Semaphore{
		name: name, limit: limit, cfg: cfg,
		keys: newKeyspace(cfg.prefix, name), st: st, shared: sharedFor(st),
	}, nil
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Limit returns the number of permits.
func (s *Semaphore) Limit() int64 { return s.limit }

func (s *Semaphore) request(opts []AcquireOption) (acquireRequest, error) {
	r := acquireRequest{limit: s.limit, weight: 1, ttl: s.cfg.ttl}
	for _, o := range opts {
		if o != nil {
			o(&r)
		}
	}
	if r.weight < 1 || r.weight > s.limit {
		return r, argError("Weight", r.weight, fmt.Sprintf("must be between 1 and the limit %d", s.limit))
	}
	if r.idGiven && r.id == "" {
		return r, argError("ID", `""`, "must not be empty")
	}
	if !r.idGiven {
		r.id = uuid.NewString()
	}
	return r, nil
}

// TryAcquire takes the permits if they are free now and never waits:
// one round trip. When the semaphore is full it returns a *BusyError
// (ErrBusy) whose RetryIn says when the earliest lease expires. A Redis
// failure is returned wrapped.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	r, err := s.request(opts)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	l, rep, err := s.attempt(ctx, r)
	switch {
	case err != nil:
		s.cfg.metrics.acquired(s.name, OutcomeError, time.Since(start))
		return nil, err
	case l == nil:
		s.cfg.metrics.acquired(s.name, OutcomeBusy, time.Since(start))
		return nil, &BusyError{Name: s.name, Weight: r.weight, InUse: rep.inUse, RetryIn: rep.retryIn, Attempts: 1}
	}
	s.cfg.metrics.acquired(s.name, OutcomeAcquired, time.Since(start))
	return l, nil
}

// Acquire waits until the permits are free and takes them. It waits
// without polling: releases anywhere wake it through Redis pub/sub, and a
// timer set to the earliest lease expiry (capped at 2s, jittered) covers
// expiries and lost messages.
//
// It gives up with a *BusyError matching ErrBusy and ErrTimeout when
// AcquireTimeout or AttemptsLimit runs out, and with an error wrapping
// context.Cause(ctx) when ctx ends first; in both cases it holds nothing.
// A Redis failure is returned at once, wrapped, rather than hidden behind
// a timeout.
func (s *Semaphore) Acquire(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	r, err := s.request(opts)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	l, err := s.wait(ctx, r, start)
	outcome := OutcomeAcquired
	switch {
	case errors.Is(err, ErrTimeout):
		outcome = OutcomeTimeout
	case err != nil && ctx.Err() != nil:
		outcome = OutcomeCanceled
	case err != nil:
		outcome = OutcomeError
	}
	s.cfg.metrics.acquired(s.name, outcome, time.Since(start))
	return l, err
}

var errAcquireTimeout = errors.New("acquire timeout")

func (s *Semaphore) wait(ctx context.Context, r acquireRequest, start time.Time) (*Lease, error) {
	parent := ctx
	if s.cfg.acquireTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.cfg.acquireTimeout, errAcquireTimeout)
		defer cancel()
	}
	hub := s.shared.hub
	// With the name's subscription already open, queue up before the first
	// attempt, so no release can slip between it and the wait. If others
	// of this process queued first, wait for a wake rather than barge in:
	// waiters of one process are served in arrival order, and a holder
	// that releases and re-acquires at once goes to the back.
	w, ahead := hub.joinOpen(s.keys.channel, r.weight)
	defer func() { w.leave() }()
	tryNow := ahead == 0
	subscribed := w != nil
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()

	var rep acquireReply
	rep.retryIn = maxFallbackWait
	for attempt := 0; ; {
		if tryNow {
			attempt++
			if attempt > 1 && !r.idGiven {
				// A fresh id per attempt: what an earlier attempt left on a
				// slow node (and its clean-up) can never meet this one.
				r.id = uuid.NewString()
			}
			var l *Lease
			var err error
			l, rep, err = s.attempt(ctx, r)
			switch {
			case err != nil && ctx.Err() != nil:
				return nil, s.gaveUp(parent, ctx, r, rep, attempt, start)
			case err != nil:
				return nil, err
			case l != nil:
				w.leave()
				w = nil
				if rep.free > 0 {
					hub.wake(s.keys.channel, rep.free) // pass on what is left
				}
				return l, nil
			}
			if s.cfg.attempts > 0 && attempt >= s.cfg.attempts {
				return nil, &BusyError{Name: s.name, Weight: r.weight, InUse: rep.inUse, RetryIn: rep.retryIn,
					Attempts: attempt, Waited: time.Since(start), timedOut: true}
			}
			if !subscribed {
				// Subscribe, then try once more: a release between the
				// attempt and the subscription would otherwise be missed.
				subscribed = true
				if w, err = hub.join(ctx, s.keys.channel, r.weight); err == nil {
					continue
				}
				if ctx.Err() != nil {
					return nil, s.gaveUp(parent, ctx, r, rep, attempt, start)
				}
				s.cfg.logger.Warn("redsem: cannot subscribe for wake-ups; waiting on timers", "name", s.name, "err", err)
			}
		}
		tryNow = true
		timer.Reset(fallbackWait(rep.retryIn))
		var wake <-chan struct{}
		if w != nil {
			wake = w.wake
		}
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			return nil, s.gaveUp(parent, ctx, r, rep, attempt, start)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// gaveUp reports why a wait ended: our own timeout, or the caller's ctx.
func (s *Semaphore) gaveUp(parent, ctx context.Context, r acquireRequest, rep acquireReply, attempts int, start time.Time) error {
	if parent.Err() == nil && errors.Is(context.Cause(ctx), errAcquireTimeout) {
		return &BusyError{Name: s.name, Weight: r.weight, InUse: rep.inUse, RetryIn: rep.retryIn,
			Attempts: attempts, Waited: time.Since(start), timedOut: true}
	}
	return fmt.Errorf("limiter: acquire %q: %w", s.name, context.Cause(parent))
}

func fallbackWait(retryIn time.Duration) time.Duration {
	d := min(retryIn, maxFallbackWait) + time.Millisecond
	return d + rand.N(d/5+1)
}

// attempt runs the acquire script once. A nil lease with a nil error means
// the semaphore was full.
func (s *Semaphore) attempt(ctx context.Context, r acquireRequest) (*Lease, acquireReply, error) {
	sent := time.Now()
	rep, err := s.st.acquire(ctx, s.keys, r)
	if err != nil {
		if !r.idGiven {
			// The script may have run with the reply lost: remove what
			// it may have granted rather than leave it for the TTL. A
			// caller-given id could name a lease held from before, so
			// that one is left to its TTL.
			go s.forget(r.id)
		}
		return nil, rep, redisError("acquire", s.name, err)
	}
	if !rep.granted {
		return nil, rep, nil
	}
	return newLease(ctx, s, r.id, rep, sent), rep, nil
}

func (s *Semaphore) forget(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ttl)
	defer cancel()
	_, _ = s.release(ctx, id, "")
}

// release runs the release script and wakes this process's own waiters at
// once, without waiting for the pub/sub message to come back.
func (s *Semaphore) release(ctx context.Context, id, token string) (int64, error) {
	hub := s.shared.hub
	n, err := s.st.release(ctx, s.keys, id, token, hub.origin)
	if n > 0 {
		hub.wake(s.keys.channel, n)
	}
	return n, err
}

// Resume adopts a lease acquired by another process (the handoff): if it
// is still held with the ticket's token, its expiry is set to now plus
// this Semaphore's TTL (shorter or longer than before: the adopter's TTL
// governs from here, so the handing-off side must stop relying on it) and
// it is kept alive here like any acquired lease. A lease
// that expired or was released gives ErrNotHeld; a ticket for another
// name, or a weight above this limit, an *ArgumentError.
func (s *Semaphore) Resume(ctx context.Context, t Ticket) (*Lease, error) {
	if err := s.checkTicket(t); err != nil {
		return nil, err
	}
	sent := time.Now()
	req := refreshRequest{keys: s.keys, id: t.ID, token: fmt.Sprint(t.Token), ttl: s.cfg.ttl}
	rep := s.st.refresh(ctx, []refreshRequest{req})[0]
	if rep.err != nil {
		return nil, redisError("resume", s.name, rep.err)
	}
	if !rep.held {
		return nil, fmt.Errorf("limiter: resume %q lease %s: %w", s.name, t.ID, ErrNotHeld)
	}
	return newLease(ctx, s, t.ID, acquireReply{granted: true, token: rep.token, weight: rep.weight}, sent), nil
}

// ReleaseTicket releases the lease a ticket names, from any process. It
// returns ErrNotHeld when that lease is no longer held, and never removes
// a later lease that reuses the id.
func (s *Semaphore) ReleaseTicket(ctx context.Context, t Ticket) error {
	if err := s.checkTicket(t); err != nil {
		return err
	}
	n, err := s.release(ctx, t.ID, fmt.Sprint(t.Token))
	if err != nil {
		return redisError("release", s.name, err)
	}
	if n == 0 {
		return fmt.Errorf("limiter: release %q lease %s: %w", s.name, t.ID, ErrNotHeld)
	}
	return nil
}

func (s *Semaphore) checkTicket(t Ticket) error {
	if err := t.validate(); err != nil {
		return err
	}
	if t.Name != s.name {
		return argError("ticket", t, fmt.Sprintf("is for %q, not %q", t.Name, s.name))
	}
	if t.Weight > s.limit {
		return argError("ticket", t, fmt.Sprintf("weight is above the limit %d", s.limit))
	}
	return nil
}

// Do acquires (waiting as Acquire does), runs fn with a context that is
// also cancelled, with cause ErrLeaseLost, if the lease is lost, and
// releases. It returns fn's error; if fn succeeded but the lease was lost
// meanwhile, the loss; and a failure to release joined to either. The
// release uses a context detached from ctx, so it happens even when ctx
// was cancelled.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context) error, opts ...AcquireOption) (err error) {
	l, err := s.Acquire(ctx, opts...)
	if err != nil {
		return err
	}
	// Deferred, so that a panic in fn (recovered further up) does not
	// leave the lease refreshed for the life of the process.
	defer func() {
		relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer relCancel()
		rerr := l.Release(relCtx)
		if rerr != nil && !(errors.Is(rerr, ErrNotHeld) && errors.Is(l.Err(), ErrLeaseLost)) {
			err = errors.Join(err, rerr)
		}
	}()
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })
	defer stop()
	if err = fn(runCtx); err == nil && errors.Is(l.Err(), ErrLeaseLost) {
		err = l.Err()
	}
	return err
}

const releaseTimeout = 5 * time.Second

// Holders lists the live leases as Redis sees them (read-only).
func (s *Semaphore) Holders(ctx context.Context) ([]Holder, error) {
	hs, err := s.st.holders(ctx, s.keys)
	if err != nil {
		return nil, redisError("holders", s.name, err)
	}
	return hs, nil
}

// Available returns how many permits are free now under this Semaphore's
// limit (never negative). It is a snapshot: use TryAcquire to take them.
func (s *Semaphore) Available(ctx context.Context) (int64, error) {
	hs, err := s.Holders(ctx)
	if err != nil {
		return 0, err
	}
	free := s.limit
	for _, h := range hs {
		free -= h.Weight
	}
	return max(free, 0), nil
}
