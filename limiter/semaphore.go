package limiter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// maxLimit keeps permit sums exact in Lua, whose numbers are doubles.
const maxLimit = 1 << 40

// Semaphore is a counting semaphore shared by every process that uses the
// same Redis and name: at most limit permits are held at once, granted in
// arrival order across processes. Each acquisition is a Lease with its own
// TTL and fencing token. A Semaphore is a cheap value made by
// Client.Semaphore and safe for concurrent use.
//
// Processes may disagree on the limit; each acquisition is checked against
// the limit of the Semaphore that asks, unless a fleet-wide limit was
// stored with SetLimit, which every process then obeys.
type Semaphore struct {
	c     *Client
	name  string
	limit int64
	cfg   config
	keys  keyspace
}

// Holder describes one live lease, as Redis sees it.
type Holder struct {
	ID     string
	Weight int64
	Token  int64
	TTL    time.Duration // until it expires unless refreshed
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Limit returns the limit the Semaphore was made with; a limit stored with
// SetLimit overrides it (see EffectiveLimit).
func (s *Semaphore) Limit() int64 { return s.limit }

func (s *Semaphore) request(ctx context.Context, opts []AcquireOption) (acquireRequest, error) {
	r := acquireRequest{limit: s.limit, weight: 1, ttl: s.cfg.ttl, owner: s.c.id, channel: s.c.channel,
		quarantine: s.cfg.quarantine, replicas: s.cfg.replicas}
	if len(opts) > 0 {
		r = r.with(opts)
	}
	switch {
	case ctx == nil:
		return r, argError("ctx", nil, "must not be nil")
	case r.weight < 1 || r.weight > s.limit:
		return r, argError("Weight", r.weight, fmt.Sprintf("must be between 1 and the limit %d", s.limit))
	case r.idGiven && r.id == "":
		return r, argError("ID", `""`, "must not be empty")
	}
	if !r.idGiven {
		r.id = s.c.newID()
	}
	return r, s.c.Err()
}

// TryAcquire takes the permits if they are free now and nobody waits for
// them, and never waits: one round trip. When the semaphore is full it
// returns a *BusyError (ErrBusy) whose RetryIn says when the earliest
// lease expires. A Redis failure is returned wrapped; after Close,
// ErrClosed.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	r, err := s.request(ctx, opts)
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
		return nil, s.busy(r, rep, 1, 0, false)
	}
	s.cfg.metrics.acquired(s.name, OutcomeAcquired, time.Since(start))
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
// AcquireTimeout or AttemptsLimit runs out, with an error wrapping
// context.Cause(ctx) when ctx ends first, and with ErrClosed when the
// Client is closed; in each case it holds nothing and leaves the queue,
// passing its turn on. A Redis failure is returned at once, wrapped,
// rather than hidden behind a timeout; on a Redlock Client a
// *QuorumError (too many nodes failed) is tried again until AcquireTimeout
// or ctx ends, and then returned.
func (s *Semaphore) Acquire(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	r, err := s.request(ctx, opts)
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

// attempt runs the acquire script once. A nil lease with a nil error means
// the semaphore was full (or it was not this request's turn).
func (s *Semaphore) attempt(ctx context.Context, r acquireRequest) (*Lease, acquireReply, error) {
	var rep acquireReply
	if err := s.c.checkEviction(ctx); err != nil {
		return nil, rep, err
	}
	var err error
	if r.idGiven {
		var done func(error, string)
		if r.reclaimAbove, done, err = s.c.ask(ctx, s.keys, r.id, true, r.ttl); err != nil {
			return nil, rep, err
		}
		defer func() { done(err, rep.token) }() // after newLease tracks a granted lease
	}
	sent := time.Now()
	rep, err = s.c.st.acquire(ctx, s.keys, r)
	s.c.hub.wake(rep.woken) // a quorum's nodes may have woken ours even when it failed
	if err != nil {
		if !r.idGiven && !errors.As(err, new(*QuorumError)) {
			// The script may have run with the reply lost: remove what
			// it may have granted rather than leave it for the TTL. A
			// caller-given id is left for the caller's retry to reclaim;
			// a quorum rolled its attempt back itself.
			id := r.id // not r: a closure over r would move it to the heap on every call
			s.c.spawn(func() { s.forget(id, "") })
		}
		return nil, rep, redisError("acquire", s.name, err)
	}
	if rep.fleetLimit > 0 {
		return nil, rep, argError("Weight", r.weight, fmt.Sprintf("is above the fleet-wide limit %d of %q (SetLimit)", rep.fleetLimit, s.name))
	}
	if rep.heldWeight > 0 {
		return nil, rep, argError("Weight", r.weight, fmt.Sprintf("differs from the weight %d that lease %s holds", rep.heldWeight, r.id))
	}
	if !rep.granted {
		return nil, rep, nil
	}
	if rerr := s.cfg.replicas.confirm("acquire", s.name, rep.acked, rep.waitErr); rerr != nil {
		// A failover could lose it: given back like a grant too late
		// for its deadline, before returning.
		s.forget(r.id, rep.token)
		return nil, rep, rerr
	}
	l, lerr := newLease(ctx, s, r.id, r.idGiven, rep, sent, s.cfg.ttl)
	if lerr != nil {
		s.forget(r.id, rep.token) // before returning: the caller, or Close, sees the permits free
		return nil, rep, fmt.Errorf("limiter: acquire %q: %w", s.name, lerr)
	}
	return l, rep, nil
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
	rep, err := s.c.st.release(ctx, s.keys, releaseRequest{id: id, token: token, own: s.c.channel, wake: true, check: !live})
	s.c.hub.wake(rep.woken)
	return rep.freed, err
}

// Resume takes over a lease acquired elsewhere (the handoff): if it is
// still held with the ticket's token, it becomes this Client's, with a new
// fencing token and this Semaphore's TTL from now (shorter or longer than
// before), and is kept alive here like any acquired lease. The previous
// holder's next refresh finds it gone and reports the loss. A lease
// parked by Lease.Park is taken over by a ticket of its id whatever the
// ticket's token. Of two Resumes of one ticket one wins; the other, like a
// lease that expired or was released, gets ErrNotHeld. A ticket for another name, or a weight above
// this limit, gives an *ArgumentError.
func (s *Semaphore) Resume(ctx context.Context, t Ticket) (*Lease, error) {
	if ctx == nil {
		return nil, argError("ctx", nil, "must not be nil")
	}
	if err := s.checkTicket(t); err != nil {
		return nil, err
	}
	if err := s.c.Err(); err != nil {
		return nil, err
	}
	// A Resume makes the lease this Client's: no reclaim of the id may run
	// meanwhile, or both would hand out a Lease with the one token.
	_, done, err := s.c.ask(ctx, s.keys, t.ID, false, s.cfg.ttl)
	if err != nil {
		return nil, err
	}
	sent := time.Now()
	rep, err := s.c.st.resume(ctx, s.keys, resumeRequest{id: t.ID, token: strconv.FormatInt(t.Token, 10), owner: s.c.id, ttl: s.cfg.ttl,
		replicas: s.cfg.replicas})
	defer func() { done(err, rep.token) }() // after newLease tracks a resumed lease
	if err != nil {
		return nil, redisError("resume", s.name, err)
	}
	if !rep.granted {
		return nil, fmt.Errorf("limiter: resume %q lease %s: %w", s.name, t.ID, ErrNotHeld)
	}
	if rerr := s.cfg.replicas.confirm("resume", s.name, rep.acked, rep.waitErr); rerr != nil {
		s.forget(t.ID, rep.token)
		return nil, rerr
	}
	l, lerr := newLease(ctx, s, t.ID, true, rep, sent, s.cfg.ttl)
	if lerr != nil {
		s.forget(t.ID, rep.token)
		return nil, fmt.Errorf("limiter: resume %q: %w", s.name, lerr)
	}
	return l, nil
}

// ReleaseTicket releases the lease a ticket names, from any process. It
// returns ErrNotHeld when that lease is no longer held with the ticket's
// token, and never removes a later lease that reuses the id.
func (s *Semaphore) ReleaseTicket(ctx context.Context, t Ticket) error {
	if ctx == nil {
		return argError("ctx", nil, "must not be nil")
	}
	if err := s.checkTicket(t); err != nil {
		return err
	}
	n, err := s.release(ctx, t.ID, strconv.FormatInt(t.Token, 10), false)
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

// Holders lists the live leases as Redis sees them (read-only; on a
// Redlock Client, those a quorum of nodes holds). A nil ctx gives an
// *ArgumentError; a Redis failure, or ctx ending first, is returned
// wrapped.
func (s *Semaphore) Holders(ctx context.Context) ([]Holder, error) {
	if ctx == nil {
		return nil, argError("ctx", nil, "must not be nil")
	}
	hs, err := s.c.st.holders(ctx, s.keys)
	if err != nil {
		return nil, redisError("holders", s.name, err)
	}
	return hs, nil
}

// Available returns how many permits are free now under the effective
// limit (see EffectiveLimit; never negative). It is a snapshot: use
// TryAcquire to take them. Errors are those of EffectiveLimit and
// Holders.
func (s *Semaphore) Available(ctx context.Context) (int64, error) {
	limit, _, err := s.EffectiveLimit(ctx)
	if err != nil {
		return 0, err
	}
	hs, err := s.Holders(ctx)
	if err != nil {
		return 0, err
	}
	free := limit
	for _, h := range hs {
		free -= h.Weight
	}
	return max(free, 0), nil
}
