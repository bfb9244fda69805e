package asynqmw

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"
)

// minRetryIn keeps a tiny MaxWait from turning into a re-queue storm.
const minRetryIn = 100 * time.Millisecond

// BusyError is what a gated task returns when no permit freed within its
// rule's MaxWait. It wraps the limiter's error, so errors.Is(err,
// limiter.ErrBusy) is true.
type BusyError struct {
	Rule      string        // the rule's Name
	Semaphore string        // the semaphore (Name, or Name:key)
	RetryIn   time.Duration // suggested delay before the next try (RetryDelay jitters it)
	err       error
}

// Error says which semaphore was full.
func (e *BusyError) Error() string {
	return fmt.Sprintf("asynqmw: %s is full; retry in about %v: %v", e.Semaphore, e.RetryIn, e.err)
}

// Unwrap returns the limiter's error.
func (e *BusyError) Unwrap() error { return e.err }

// IsFailure returns a Config.IsFailure for asynq.Server: a *BusyError is
// not a failure (asynq re-queues the task without counting a retry);
// every other error is judged by next, or counted as a failure when next
// is nil (asynq's default).
func IsFailure(next func(error) bool) func(error) bool {
	return func(err error) bool {
		var busy *BusyError
		if errors.As(err, &busy) {
			return false
		}
		if next != nil {
			return next(err)
		}
		return err != nil
	}
}

// Note that asynq also hands every re-queued *BusyError to
// Config.ErrorHandler: filter it there if that alerts.
//
// RetryDelay returns a Config.RetryDelayFunc for asynq.Server: a
// *BusyError is retried after its RetryIn, jittered to [½, 1½)× so that
// re-queued tasks do not come back together; every other error goes to
// next, or to asynq.DefaultRetryDelayFunc when next is nil. asynq moves
// due retries to the queue every Config.DelayedTaskCheckInterval (5s by
// default), which bounds how soon a re-queued task runs again.
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
