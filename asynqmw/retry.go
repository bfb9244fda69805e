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

// minRetryIn keeps a tiny MaxWait from turning into a re-queue storm.
const minRetryIn = 100 * time.Millisecond

// BusyError is what a gated task returns when no permit freed within its
// wait (see New). errors.Is(err, limiter.ErrBusy) is true for it.
type BusyError struct {
	Rule      string        // the rule's Name
	Semaphore string        // the semaphore that was full (Name, or Name:key)
	RetryIn   time.Duration // suggested delay before the next try (RetryDelay jitters it)
	// Since is when the task's busy re-queues began, with MaxGated (else
	// zero); Exceeded says that is longer ago than MaxGated allows, which
	// makes IsFailure count the error as a failure.
	Since    time.Time
	Exceeded bool
	err      error
}

// sinceMark carries Since in the error text, which asynq stores as the
// task's last error: the next busy return reads it back (MaxGated).
const sinceMark = " [gated since "

// Error says which semaphore was full and, with MaxGated, since when the
// task is gated.
func (e *BusyError) Error() string {
	msg := fmt.Sprintf("asynqmw: %s is full; retry in about %v: %v", e.Semaphore, e.RetryIn, e.err)
	if e.Exceeded {
		msg = fmt.Sprintf("asynqmw: %s is full, and the task is gated for longer than MaxGated (counted as a failure): %v", e.Semaphore, e.err)
	}
	if !e.Since.IsZero() {
		msg += sinceMark + e.Since.UTC().Format(time.RFC3339Nano) + "]"
	}
	return msg
}

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

// Unwrap returns the error that ended the wait.
func (e *BusyError) Unwrap() error { return e.err }

// Is makes errors.Is(err, limiter.ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == limiter.ErrBusy }

// IsFailure returns a Config.IsFailure for asynq.Server: a *BusyError is
// not a failure (asynq re-queues the task without counting a retry)
// unless its Exceeded is set (see MaxGated); every other error is judged
// by next, or counted as a failure when next is nil (asynq's default).
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

// RetryDelay returns a Config.RetryDelayFunc for asynq.Server: a
// *BusyError is retried after its RetryIn, jittered to [½, 1½)× so that
// re-queued tasks do not come back together; every other error goes to
// next, or to asynq.DefaultRetryDelayFunc when next is nil. asynq moves
// due retries to the queue every Config.DelayedTaskCheckInterval (5s by
// default), which bounds how soon a re-queued task runs again. Note that
// asynq also hands every re-queued *BusyError to Config.ErrorHandler:
// filter it there if that alerts.
func RetryDelay(next asynq.RetryDelayFunc) asynq.RetryDelayFunc {
	return func(n int, err error, t *asynq.Task) time.Duration {
		var busy *BusyError
		if errors.As(err, &busy) {
			d := busy.RetryIn
			return d/2 + rand.N(d+1)
		}
		if next != nil {
			return next(n, err, t)
		}
		return asynq.DefaultRetryDelayFunc(n, err, t)
	}
}
