package limiter

import (
	"context"
	"fmt"
	"time"
)

// errParked ends a lease its holder parked (Lease.Park).
var errParked = fmt.Errorf("%w: parked", ErrNotHeld)

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
	l.mu.Lock()
	l.handedOff = true
	l.mu.Unlock()
	if !l.end(errParked, false) {
		return l.Err()
	}
	s := l.sem
	rep, err := s.c.st.resume(ctx, s.keys, resumeRequest{id: l.id, token: l.token, owner: parkedOwner,
		ttl: ttl, replicas: s.cfg.replicas})
	if err != nil {
		return redisError("park", s.name, err)
	}
	if !rep.granted {
		return fmt.Errorf("limiter: park %q lease %s: %w", s.name, l.id, ErrNotHeld)
	}
	return s.cfg.replicas.confirm("park", s.name, rep.acked, rep.waitErr)
}

// parkedOwner is the holder of a parked lease: no Client's id is empty.
const parkedOwner = ""
