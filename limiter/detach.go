package limiter

// Detaching: a holder lets go of a lease here while it lives on in
// Redis, for another process (or a retry) to take over by Resume.

import (
	"context"
	"fmt"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// errParked ends a lease its holder parked (Lease.Park).
var errParked = fmt.Errorf("%w: parked", ErrNotHeld)

// StopRefresh stops keeping the lease alive from this process, typically
// after its Ticket was handed to another process. The lease stays in Redis
// until its TTL runs out or someone releases it or takes it over (Client.Close
// leaves it there too); locally it then ends with ErrLeaseLost, without
// OnLost (that end is expected). A lease a release just granted directly, which
// Redis keeps for only a few seconds until its first refresh, is first
// refreshed to its TTL (bounded by ReleaseTimeout; if that fails, it
// lapses sooner).
func (l *Lease) StopRefresh() {
	l.mu.Lock()
	short := l.short
	l.mu.Unlock()
	if short {
		ctx, cancel := context.WithTimeout(context.Background(), l.sem.cfg.releaseTimeout)
		_ = l.Refresh(ctx)
		cancel()
	}
	l.detach() // its end at the TTL is expected, not a loss
}

// detach lets go of the lease here while it lives on in Redis (StopRefresh,
// Park): nothing keeps it alive or regains it from now on, and Close
// leaves it.
func (l *Lease) detach() {
	l.mu.Lock()
	l.keep = detached
	l.mu.Unlock()
	l.sem.c.refresher.remove(l)
}

func (l *Lease) isDetached() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.keep == detached
}

// Park leaves the lease in Redis, held by no process, for ttl from now
// (shorter or longer than it had left), so that a later Resume of any ticket
// of its id takes it over: the way to keep permits for work that another
// process, or a retry, will continue without knowing the token the lease
// has by then (the scheduler keeps a failed run's lock this way for
// asynq's retry). Nothing refreshes a parked lease; unresumed, it ends at
// ttl and its permits come back.
//
// The lease ends here first, whatever Redis answers (Err matches
// ErrNotHeld; no OnLost), as a Release does: the parked incarnation gets
// a new fencing token, so this Lease can no longer touch it, and a Release
// afterwards returns ErrNotHeld. A lease that is not held gives ErrNotHeld
// (or the ErrLeaseLost it ended with). A Redis failure is returned
// wrapped: the lease is then parked, or still held under its old token
// until its TTL, unrefreshed; a Release gives it back in that case, and
// cannot touch it in the other. With WaitReplicas a park the replicas did
// not confirm is a *ReplicationError (parked on the master). A nil ctx or
// a ttl <= 0 gives an *ArgumentError and leaves the lease held.
func (l *Lease) Park(ctx context.Context, ttl time.Duration) error {
	switch {
	case ctx == nil:
		return argError("ctx", nil, "must not be nil")
	case ttl <= 0:
		return argError("ttl", ttl, "must be > 0")
	}
	if err := l.Err(); err != nil {
		return err
	}
	// Given up before Redis is asked, as a Release is: a reply lost after
	// the park landed must not leave this Lease live beside whoever
	// resumes it, and no refresh may regain the old incarnation.
	l.detach()
	if !l.end(errParked, false) {
		return l.Err()
	}
	s := l.sem
	rep, err := s.c.st.Resume(ctx, s.keys, store.ResumeRequest{ID: l.id, Token: l.token, Owner: parkedOwner,
		TTL: ttl, Replicas: s.cfg.replicas})
	if err != nil {
		return redisError("park", s.name, err)
	}
	if !rep.Granted {
		return fmt.Errorf("limiter: park %q lease %s: %w", s.name, l.id, ErrNotHeld)
	}
	return s.confirm("park", rep.Acked, rep.WaitErr)
}

// parkedOwner is the holder of a parked lease: no Client's id is empty.
const parkedOwner = ""
