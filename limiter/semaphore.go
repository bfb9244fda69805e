package limiter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redsem/redsem/limiter/internal/quorum"
	"github.com/redsem/redsem/limiter/internal/store"
)

// maxLimit keeps permit sums exact in Lua, whose numbers are doubles.
const maxLimit = store.MaxLimit

// Semaphore is a counting semaphore shared by every process that uses the
// same Redis and name: at most limit permits are held at once, granted in
// arrival order across processes. Each acquisition is a Lease with its own
// TTL and fencing token. A Semaphore is a cheap value made by
// Client.Semaphore and safe for concurrent use.
//
// Processes may disagree on the limit; each acquisition is checked against
// the limit of the Semaphore that asks, unless a fleet-wide limit was
// stored with inspect.Inspector.SetLimit, which every process then obeys.
type Semaphore struct {
	c     *Client
	name  string
	limit int64
	cfg   config
	keys  store.Keyspace
	wake  string // its shard channel (see hub)
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Limit returns the limit the Semaphore was made with; a limit stored with
// inspect.Inspector.SetLimit overrides it.
func (s *Semaphore) Limit() int64 { return s.limit }

// request checks one acquisition's arguments and returns its request and
// how long Acquire may wait (AcquireTimeout, or MaxWait's).
func (s *Semaphore) request(ctx context.Context, opts []AcquireOption) (store.AcquireRequest, time.Duration, error) {
	r := store.AcquireRequest{Limit: s.limit, Weight: 1, TTL: s.cfg.ttl, Owner: s.c.id, Channel: s.c.hub.channel(s.wake),
		Quarantine: s.cfg.quarantine, Replicas: s.cfg.replicas, Learn: s.cfg.learn}
	bound := s.cfg.acquireTimeout
	if len(opts) > 0 {
		// Only a request with options pays for them: an option takes o's
		// address, which moves o to the heap.
		o := acquireOptions{weight: 1}
		for _, opt := range opts {
			if opt != nil {
				opt(&o)
			}
		}
		r.Weight, r.ID, r.IDGiven = o.weight, o.id, o.idGiven
		if !o.idGiven {
			r.IDPrefix = o.id
		}
		if o.maxWait != nil {
			bound = *o.maxWait
		}
	}
	switch {
	case ctx == nil:
		return r, 0, argError("ctx", nil, "must not be nil")
	case r.Weight < 1 || r.Weight > s.limit:
		return r, 0, argError("Weight", r.Weight, fmt.Sprintf("must be between 1 and the limit %d", s.limit))
	case r.IDGiven && r.ID == "":
		return r, 0, argError("ID", `""`, "must not be empty")
	case strings.Contains(r.IDPrefix, " "):
		return r, 0, argError("IDPrefix", r.IDPrefix, "must not contain a space")
	case bound < 0:
		return r, 0, argError("MaxWait", bound, "must be >= 0")
	}
	if !r.IDGiven {
		r.ID = r.IDPrefix + s.c.newID()
	}
	return r, bound, s.c.closedErr()
}

// TryAcquire takes the permits if they are free now and nobody waits for
// them, and never waits: one round trip. When the semaphore is full it
// returns a *BusyError (ErrBusy) whose RetryIn says when the earliest
// lease expires. A Redis failure is returned wrapped; after Close,
// ErrClosed.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	r, _, err := s.request(ctx, opts)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	l, rep, err := s.attempt(ctx, r)
	for i := 0; i < lateRetries && errors.Is(err, errReplyLate) && ctx.Err() == nil; i++ {
		// Granted, but the reply came too late to use the lease, which
		// was given back: the permits were free, so ask again (a new id,
		// as a quorum's failed attempt is rolled back by it).
		if !r.IDGiven {
			r.ID = r.IDPrefix + s.c.newID()
		}
		l, rep, err = s.attempt(ctx, r)
	}
	switch {
	case err != nil:
		s.cfg.observer.Acquired(s.name, outcomeError, time.Since(start))
		return nil, err
	case l == nil:
		s.cfg.observer.Acquired(s.name, outcomeBusy, time.Since(start))
		return nil, s.busy(r, rep, time.Now(), 1, 0, false)
	}
	s.cfg.observer.Acquired(s.name, outcomeAcquired, time.Since(start))
	return l, nil
}

// Acquire waits until the permits are free and it is this request's turn,
// and takes them. Requests are served in arrival order across every
// process (see the package doc); waiting sends nothing but the Client's
// batched keep-alive of its queue entries: the release that makes room
// grants (or, where the package doc says, wakes) exactly the waiters that
// now fit.
//
// It gives up with a *BusyError matching ErrBusy and ErrTimeout when
// AcquireTimeout (or this call's MaxWait) runs out, with an error wrapping
// context.Cause(ctx) when ctx ends first, and with ErrClosed when the
// Client is closed; in each case it holds nothing and leaves the queue,
// passing its turn on. A Redis failure is returned at once, wrapped,
// rather than hidden behind a timeout; on a Redlock Client a
// *QuorumError (too many nodes failed) is tried again until AcquireTimeout
// or ctx ends, and then returned.
func (s *Semaphore) Acquire(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	r, bound, err := s.request(ctx, opts)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	l, err := s.wait(ctx, r, bound, start)
	outcome := outcomeAcquired
	switch {
	case errors.Is(err, ErrTimeout):
		outcome = outcomeTimeout
	case err != nil && ctx.Err() != nil:
		outcome = outcomeCanceled
	case err != nil:
		outcome = outcomeError
	}
	s.cfg.observer.Acquired(s.name, outcome, time.Since(start))
	return l, err
}

// attempt runs the acquire script once. A nil lease with a nil error means
// the semaphore was full (or it was not this request's turn).
func (s *Semaphore) attempt(ctx context.Context, r store.AcquireRequest) (*Lease, store.AcquireReply, error) {
	var rep store.AcquireReply
	if err := s.c.checkEviction(ctx); err != nil {
		return nil, rep, err
	}
	var err error
	if r.IDGiven {
		var done func(error, string)
		if r.ReclaimAbove, done, err = s.c.ids.ask(ctx, leaseKey{s.keys.ID(), r.ID}, true, r.TTL+s.cfg.drift(r.TTL)); err != nil {
			return nil, rep, err
		}
		defer func() { done(err, rep.Token) }() // after newLease tracks a granted lease
	}
	sent := time.Now()
	rep, err = s.c.st.Acquire(ctx, s.keys, r)
	s.c.hub.wake(rep.Woken) // a quorum's nodes may have woken ours even when it failed
	if err != nil {
		if !r.IDGiven && !errors.As(err, new(*quorum.Error)) {
			// The script may have run with the reply lost: remove what
			// it may have granted rather than leave it for the TTL. A
			// caller-given id is left for the caller's retry to reclaim;
			// a quorum rolled its attempt back itself.
			id := r.ID // not r: a closure over r would move it to the heap on every call
			s.c.spawn(func() { s.forget(id, "") })
		}
		return nil, rep, redisError("acquire", s.name, err)
	}
	if rep.FleetLimit > 0 {
		return nil, rep, argError("Weight", r.Weight, fmt.Sprintf("is above the fleet-wide limit %d of %q (SetLimit)", rep.FleetLimit, s.name))
	}
	if rep.HeldWeight > 0 {
		return nil, rep, argError("Weight", r.Weight, fmt.Sprintf("differs from the weight %d that lease %s holds", rep.HeldWeight, r.ID))
	}
	if !rep.Granted {
		if rep.Restarted {
			s.c.quarantined(rep.Quarantine)
		}
		return nil, rep, nil
	}
	// Not err: done reads it, and Redis did answer.
	l, aerr := s.adopt(ctx, "acquire", r.ID, r.IDGiven, rep, sent, s.cfg.ttl)
	return l, rep, aerr
}

// adopt makes the Lease of a grant (an acquire's, a direct grant's or a
// Resume's, which op names) that Redis made to last at least life after
// sent: confirmed by the replicas WaitReplicas asks for, else given back
// with the *ReplicationError (a failover could lose it); given back too,
// before returning, when it cannot be used (see newLease), so that the
// caller, or Close, sees the permits free.
func (s *Semaphore) adopt(ctx context.Context, op, id string, given bool, rep store.AcquireReply, sent time.Time, life time.Duration) (*Lease, error) {
	if err := s.confirm(op, rep.Acked, rep.WaitErr); err != nil {
		s.forget(id, rep.Token)
		return nil, err
	}
	l, err := newLease(ctx, s, id, given, rep, sent, life)
	if err != nil {
		s.forget(id, rep.Token)
		return nil, fmt.Errorf("limiter: %s %q: %w", op, s.name, err)
	}
	return l, nil
}

// forget releases a lease that has no Lease (a grant newLease refused, or
// one a lost reply may have made), by its token when known so that a later
// lease of the id is never touched. It is bounded by ReleaseTimeout and
// not by the Client's life, so it also works once Close began.
func (s *Semaphore) forget(id, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.releaseTimeout)
	defer cancel()
	_, _ = bounded(s.c, ctx, func() (int64, error) { return s.release(ctx, id, token, false) })
}

// release runs the release script and wakes this Client's own waiters at
// once, without a round trip through pub/sub. live says the caller knows
// the lease had not expired (a Lease within its local deadline), so
// Redis need not check.
func (s *Semaphore) release(ctx context.Context, id, token string, live bool) (int64, error) {
	rep, err := s.c.st.Release(ctx, s.keys, store.ReleaseRequest{ID: id, Token: token, Channel: s.c.hub.channel(s.wake), Wake: true, Check: !live})
	s.c.hub.wake(rep.Woken)
	return rep.Freed, err
}
