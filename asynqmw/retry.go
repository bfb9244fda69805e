package asynqmw

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redsem/redsem/limiter"
)

// minRetryIn keeps a tiny AcquireTimeout from turning into a re-queue
// storm.
const minRetryIn = 100 * time.Millisecond

// BusyError is what a task returns when something it needs is taken:
// a permit of one of its rules (New) that did not free within the wait,
// or its job's lock, which an earlier run of the same tick still holds
// (scheduler.Adopt). It is not a failure: with IsFailure and RetryDelay
// in the server's Config, asynq re-queues the task after RetryIn without
// spending a retry, unless Exceeded is set (MaxGated).
// errors.Is(err, limiter.ErrBusy) is true for it.
type BusyError struct {
	// Semaphore is what was taken: a rule's Name (Name:key for a Key
	// rule), or a scheduled job's lock; for a pause, the names paused.
	Semaphore string
	// RetryIn is the delay RetryDelay gives asynq. New's middleware sets
	// it to the rule's AcquireTimeout (at least 100ms), jittered to
	// [½, 1½)× so that re-queued tasks do not come back together; when a
	// rate's slot is too far off, to that slot's wait, spread over
	// [1, 1½)×; for a pause, to the pause's end (spread likewise when the
	// task found its rule paused).
	RetryIn time.Duration
	// Rate: the rule's rate (not its permits) was busy. Paused: the
	// rule's name (its rate, or its semaphore) is paused, or the task's
	// handler paused it (PauseError).
	Rate, Paused bool
	// Parked: the task left its handler slot while its Key rule's
	// permit is taken (Park); the key's next release puts it back, and
	// RetryIn (30s) is only the fallback.
	Parked bool
	// Since is when the task's busy re-queues began, with MaxGated (else
	// zero); Exceeded says that is longer ago than MaxGated allows, which
	// makes IsFailure count the error as a failure.
	Since    time.Time
	Exceeded bool
	// Reason is why the task could not go, as the limiter's refusal said
	// (limiter.BusyError.Reason), or ReasonKeyLimit for a Key rule whose
	// key's own limit was full; "" when no refusal says (a Redis failure,
	// a held job lock). ETA is how long, from the refusal, until the gate
	// should let it through: exact for a pause, the restart quarantine or
	// a rate's slot; for a full limit (or one held to a fleet limit) the
	// earliest lease expiry, a lower bound (inspect.Inspector.Why
	// estimates it, with one more read).
	Reason limiter.Reason
	ETA    time.Duration
	// Err says what ended the wait (Unwrap returns it); it may be nil.
	Err error
}

// ReasonKeyLimit is a BusyError's Reason when a Key rule's key was full:
// the key's own limit (KeyLimit, else Limit), not the rule's other
// keys, held the task back.
const ReasonKeyLimit limiter.Reason = "key-limit"

// sinceMark carries Since in the error text, which asynq stores as the
// task's last error: the next busy return reads it back (MaxGated).
const sinceMark = " [gated since "

// Error says what was busy and, with MaxGated, since when the task is
// gated.
func (e *BusyError) Error() string {
	what := "busy"
	switch {
	case e.Paused:
		what = "paused"
	case e.Parked:
		what = parkedText
	}
	msg := fmt.Sprintf("asynqmw: %s is %s; retry in %v", e.Semaphore, what, e.RetryIn.Round(time.Millisecond))
	if e.Reason != "" {
		msg = fmt.Sprintf("asynqmw: %s is %s (%s, eta %v); retry in %v", e.Semaphore, what, e.Reason, e.ETA.Round(time.Millisecond), e.RetryIn.Round(time.Millisecond))
	}
	if e.Exceeded {
		msg = fmt.Sprintf("asynqmw: %s is busy, and the task is gated for longer than MaxGated (counted as a failure)", e.Semaphore)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if !e.Since.IsZero() {
		msg += sinceMark + e.Since.UTC().Format(time.RFC3339Nano) + "]"
	}
	return msg
}

// parkedText marks a parked task's error, which asynq keeps as its
// LastErr: an unpark runs only a task that it marks.
const parkedText = "busy (parked until a release)"

// parseSince reads Since back from a BusyError's text.
func parseSince(lastErr string) (time.Time, bool) {
	i := strings.LastIndex(lastErr, sinceMark)
	if i < 0 {
		return time.Time{}, false
	}
	v, _, ok := strings.Cut(lastErr[i+len(sinceMark):], "]")
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}

// Unwrap returns Err.
func (e *BusyError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, limiter.ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == limiter.ErrBusy }

// RetryError is a failure that sets its own retry delay: with RetryDelay
// in the server's Config, asynq retries the task after exactly RetryIn,
// spending a retry as for any failure. scheduler.Adopt returns it when a
// run fails and its job's lock is kept for the retry: the lock waits
// RetryIn (plus the job's TTL) for it, so a retry that asynq delays
// otherwise may find the lock gone and be skipped.
type RetryError struct {
	RetryIn time.Duration
	Err     error // the handler's error (Unwrap returns it)
}

// Error is Err's text and the delay.
func (e *RetryError) Error() string { return fmt.Sprintf("%v; retry in %v", e.Err, e.RetryIn) }

// Unwrap returns Err.
func (e *RetryError) Unwrap() error { return e.Err }

// IsFailure returns a Config.IsFailure for asynq.Server: an error that
// is or wraps a *BusyError is not a failure (asynq re-queues the task
// without counting a retry) unless its Exceeded is set (see MaxGated);
// every other error, a *RetryError included, is judged by next, or
// counted as a failure when next is nil (asynq's default).
func IsFailure(next func(error) bool) func(error) bool {
	return func(err error) bool {
		var busy *BusyError
		if errors.As(err, &busy) {
			return busy.Exceeded
		}
		if next != nil {
			return next(err)
		}
		return err != nil
	}
}

// RetryDelay returns a Config.RetryDelayFunc for asynq.Server: an error
// that is or wraps a *BusyError or a *RetryError is retried after its
// RetryIn; every other error goes to next, or to
// asynq.DefaultRetryDelayFunc when next is nil. asynq moves due retries
// to the queue every Config.DelayedTaskCheckInterval (5s by default),
// which bounds how soon a re-queued task runs again. asynq also hands
// every re-queued *BusyError to Config.ErrorHandler: filter it there
// (errors.Is(err, limiter.ErrBusy)) if that alerts.
func RetryDelay(next asynq.RetryDelayFunc) asynq.RetryDelayFunc {
	return func(n int, err error, t *asynq.Task) time.Duration {
		var busy *BusyError
		if errors.As(err, &busy) {
			return busy.RetryIn
		}
		var retry *RetryError
		if errors.As(err, &retry) {
			return retry.RetryIn
		}
		if next != nil {
			return next(n, err, t)
		}
		return asynq.DefaultRetryDelayFunc(n, err, t)
	}
}

// jitter spreads d over [½, 1½)×d.
func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d+1) }

// later spreads d over [1, 1½)×d: never before d, when a rate slot or a
// pause's end would come.
func later(d time.Duration) time.Duration { return d + rand.N(d/2+1) }
