package limiter

import (
	"errors"
	"fmt"
	"time"

	"github.com/redsem/redsem/limiter/internal/quorum"
	"github.com/redsem/redsem/limiter/internal/store"
)

var (
	// ErrBusy reports that the semaphore had no room for the request, or
	// that a rate's next time was too far off. TryAcquire returns it at
	// once; Acquire returns it (together with ErrTimeout) when
	// AcquireTimeout ran out, RateLimit.WaitN when the wait would outlast
	// it. Use errors.As with *BusyError for the retry hint.
	ErrBusy = errors.New("limiter: no room (semaphore full, or rate spent)")

	// ErrTimeout reports that Acquire gave up waiting because AcquireTimeout
	// elapsed. It always comes with ErrBusy.
	// Cancellation or a deadline of the caller's own context is reported as
	// that context's error instead.
	ErrTimeout = errors.New("limiter: timed out waiting for a permit")

	// ErrLeaseLost reports that a lease stopped being held while this
	// process still counted on it: Redis no longer had it, or no refresh
	// was confirmed before the local deadline. It is the cause of the
	// lease's Context and the value of Lease.Err.
	ErrLeaseLost = errors.New("limiter: lease lost")

	// ErrNotHeld reports that a lease named by a Ticket or a Lease is not
	// (or no longer) held in Redis: Resume, Release and ReleaseTicket
	// return it, and never touch another holder's lease.
	ErrNotHeld = errors.New("limiter: lease not held")

	// ErrInvalidArgument is matched by every *ArgumentError.
	ErrInvalidArgument = errors.New("limiter: invalid argument")

	// ErrNotReplicated reports that fewer replicas than WaitReplicas asks
	// for confirmed a grant, a Resume or a refresh in time. Every
	// *ReplicationError matches it.
	ErrNotReplicated = errors.New("limiter: not confirmed by enough replicas")
)

// ErrClosed is returned by calls on a Client (or its semaphores) after
// Close, and ends the waits that Close interrupts.
var ErrClosed = errors.New("limiter: client closed")

// ErrReleaseFailed reports that the release at the end of Lease.Run (or
// Do) failed, so the permits come back only when the lease's TTL runs out;
// the work itself ran under the lease. The release's own error (usually a
// Redis failure or ReleaseTimeout running out) is wrapped beside it.
var ErrReleaseFailed = errors.New("limiter: release after the work failed (the permits free at the TTL)")

// ErrEvictingRedis is returned (unless AllowEviction) by acquisitions on
// a Redis whose maxmemory policy may evict the semaphores' keys: an
// evicted key forgets its holders, and others are then granted their
// permits.
var ErrEvictingRedis = errors.New("limiter: Redis may evict the semaphore keys (maxmemory with an evicting maxmemory-policy)")

// ErrRatesUnsupported is returned by Client.RateLimit on a Redlock
// Client: a quorum of independent rates would let through up to N/quorum
// times the rate (each node counts only the events it saw), on clocks
// that disagree. Keep a rate on one Redis deployment (a node, Sentinel or
// Cluster).
var ErrRatesUnsupported = errors.New("limiter: rate limits need one Redis deployment, not Redlock's independent nodes")

// ReplicationError reports how many replicas confirmed a write that
// WaitReplicas wanted on more (see there for what happened to the lease).
// errors.Is(err, ErrNotReplicated) is true for it.
type ReplicationError struct {
	Name    string
	Op      string // "acquire", "resume" or "refresh"
	Want    int    // replicas asked for
	Acked   int    // replicas that confirmed within Timeout
	Timeout time.Duration
	// Err is why WAIT itself failed (then Acked is 0), or nil.
	Err error
	// Connected is how many replicas the master had connected when fewer
	// than Want confirmed and it had fewer than Want (a promoted replica
	// has none until another syncs from it): no timeout could have been
	// met. -1 when the master had enough, or was not asked.
	Connected int
	// Master is the address of that master when Connected is known.
	Master string
}

// Error says how many replicas confirmed the write.
func (e *ReplicationError) Error() string {
	msg := fmt.Sprintf("limiter: %s %q: %d of %d replica(s) confirmed within %v", e.Op, e.Name, e.Acked, e.Want, e.Timeout)
	if e.Connected >= 0 {
		msg += fmt.Sprintf(": master %s has only %d connected replica(s)", e.Master, e.Connected)
	}
	if e.Err != nil {
		msg += ": WAIT failed: " + e.Err.Error()
	}
	return msg
}

// Unwrap returns ErrNotReplicated, and Err when WAIT itself failed.
func (e *ReplicationError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrNotReplicated}
	}
	return []error{ErrNotReplicated, e.Err}
}

// ArgumentError names the constructor argument, option or ticket field that
// is wrong and why. errors.Is(err, ErrInvalidArgument) is true for it.
type ArgumentError struct {
	Arg    string // e.g. "limit", "TTL", "Weight", "ticket"
	Value  any
	Reason string
}

// Error says which argument is wrong and why.
func (e *ArgumentError) Error() string {
	return fmt.Sprintf("limiter: invalid %s %v: %s", e.Arg, e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidArgument) true.
func (e *ArgumentError) Is(target error) bool { return target == ErrInvalidArgument }

func argError(arg string, value any, reason string) error {
	return &ArgumentError{Arg: arg, Value: value, Reason: reason}
}

// BusyError is returned when no permit could be had. It matches ErrBusy,
// and also ErrTimeout when it ends a wait.
type BusyError struct {
	Name   string
	Weight int64 // permits requested
	InUse  int64 // permits in use at the last attempt
	// RetryIn: until the earliest current lease expires, a sensible time
	// to try again; for an Acquire that gave up behind other waiters, it
	// may be the lease TTL, since the permits that expire first are theirs.
	RetryIn  time.Duration
	Attempts int
	Waited   time.Duration
	// Restarted: Redis refused because it started less than the
	// RestartQuarantine ago and has no state for the name; RetryIn is then
	// until the quarantine ends.
	Restarted bool
	// Rate: a RateLimit's; RetryIn is then how long the event would have
	// had to wait, and Weight its cost.
	Rate bool
	// Paused: the name is paused (inspect.Inspector.Pause); RetryIn is at least
	// until the pause ends.
	Paused   bool
	timedOut bool
	// fleet: the fleet limit (set or learned) below the Semaphore's own
	// that kept it out, the permits in use leaving room under its own (0:
	// none did).
	fleet int64
}

// busy reports rep, the answer that arrived at answered: its RetryIn (the
// quarantine's end, when Restarted) is counted from now, so that an error
// made after a wait is current.
func (s *Semaphore) busy(r store.AcquireRequest, rep store.AcquireReply, answered time.Time, attempts int, waited time.Duration, timedOut bool) *BusyError {
	retry := rep.RetryIn
	if rep.Restarted {
		retry = rep.Quarantine
	}
	return &BusyError{Name: s.name, Weight: r.Weight, InUse: rep.InUse, RetryIn: max(retry-time.Since(answered), 0),
		Attempts: attempts, Waited: waited, Restarted: rep.Restarted, Paused: rep.Paused, timedOut: timedOut,
		fleet: fleetHeld(r, rep)}
}

// fleetHeld is the fleet limit that kept r out when it is below r's own
// limit and the permits in use left room for r under its own (0 if not):
// what inspect.Inspector.Why calls ReasonFleetLimit, less the waiters ahead, which
// the reply does not count.
func fleetHeld(r store.AcquireRequest, rep store.AcquireReply) int64 {
	if !store.HeldByFleet(rep.Limit, r.Limit, rep.InUse, r.Weight) {
		return 0
	}
	return rep.Limit
}

// Reason says what refused the request: ReasonPaused, ReasonQuarantine
// (Restarted), ReasonRate, ReasonFleetLimit (a fleet limit, set or
// learned, below the Semaphore's own, where the permits in use left room
// under its own), else ReasonFull. RetryIn is then exactly until the
// pause, the quarantine or the rate's slot ends; otherwise it is the
// earliest expiry, a lower bound (inspect.Inspector.Why estimates the wait from
// the queue, at the cost of a read this error does not make).
func (e *BusyError) Reason() Reason {
	switch {
	case e.Paused:
		return ReasonPaused
	case e.Restarted:
		return ReasonQuarantine
	case e.Rate:
		return ReasonRate
	case e.fleet > 0:
		return ReasonFleetLimit
	}
	return ReasonFull
}

// Error says how full the semaphore was and when to try again.
func (e *BusyError) Error() string {
	if e.Rate {
		why := ""
		if e.Paused {
			why = " (paused)"
		}
		return fmt.Sprintf("limiter: %q: an event of cost %d would wait %v%s, past the deadline or AcquireTimeout: %v",
			e.Name, e.Weight, e.RetryIn.Round(time.Microsecond), why, ErrTimeout)
	}
	if e.Restarted || e.Paused {
		msg := fmt.Sprintf("limiter: %q: Redis restarted and grants nothing new for %v (RestartQuarantine)", e.Name, e.RetryIn)
		if e.Paused {
			msg = fmt.Sprintf("limiter: %q is paused for %v (Inspector.Pause)", e.Name, e.RetryIn)
		}
		if e.timedOut {
			msg += fmt.Sprintf(": no %d permit(s) after %d attempt(s) in %v: %v",
				e.Weight, e.Attempts, e.Waited.Round(time.Millisecond), ErrTimeout)
		}
		return msg
	}
	full, of := "full", ""
	if e.fleet > 0 {
		full, of = fmt.Sprintf("held to its fleet limit %d", e.fleet), fmt.Sprintf(" of the fleet limit %d", e.fleet)
	}
	if e.timedOut {
		return fmt.Sprintf("limiter: %q: no %d permit(s) after %d attempt(s) in %v (%d in use%s; earliest expiry in %v): %v",
			e.Name, e.Weight, e.Attempts, e.Waited.Round(time.Millisecond), e.InUse, of, e.RetryIn, ErrTimeout)
	}
	return fmt.Sprintf("limiter: %q is %s: %d permit(s) in use, %d requested; earliest expiry in %v",
		e.Name, full, e.InUse, e.Weight, e.RetryIn)
}

// Is matches ErrBusy, and ErrTimeout when the error ended a wait.
func (e *BusyError) Is(target error) bool {
	return target == ErrBusy || (e.timedOut && target == ErrTimeout)
}

// redisError wraps a failure talking to Redis with what was being done:
// the one place a store's error reaches the caller, so a quorum's failure
// becomes the *QuorumError it is shown as.
func redisError(op, name string, err error) error {
	var qe *quorum.Error
	if errors.As(err, &qe) {
		err = (*QuorumError)(qe)
	}
	return fmt.Errorf("limiter: %s %q: %w", op, name, err)
}

// QuorumError reports an operation on a Redlock semaphore that did not
// reach a quorum of nodes: which nodes said the semaphore was full, and
// which failed (their errors are wrapped: errors.Is and errors.As see
// them). It matches ErrBusy when any node was full.
type QuorumError struct {
	Op     string
	Quorum int
	Nodes  int
	OK     int              // nodes that granted or answered
	Busy   []string         // nodes that were full
	Failed map[string]error // nodes that failed, by address
}

// Error names the nodes that were full and those that failed, with why.
func (e *QuorumError) Error() string { return (*quorum.Error)(e).Error() }

// Unwrap returns ErrBusy when any node was full, then the failed nodes'
// errors, ordered by address.
func (e *QuorumError) Unwrap() []error {
	errs := (*quorum.Error)(e).Unwrap()
	if len(e.Busy) > 0 {
		errs = append([]error{ErrBusy}, errs...)
	}
	return errs
}
