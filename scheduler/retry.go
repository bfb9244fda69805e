package scheduler

import (
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redsem/redsem/limiter"
)

// RetryError is what a scheduled task returns when its handler failed and
// asynq will retry it: the job's lock was kept for the retry (see Adopt).
// It wraps the handler's error (errors.Is and errors.As see through it).
// With RetryDelay in the server's Config, asynq retries after RetryIn, the
// delay the lock was kept for.
type RetryError struct {
	Job     string
	RetryIn time.Duration // from Adopt's RetryDelayFunc (default asynq.DefaultRetryDelayFunc)
	Err     error         // the handler's error
}

// Error says that the run failed and the lock waits for the retry.
func (e *RetryError) Error() string {
	return fmt.Sprintf("redsem scheduler: job %s failed (its lock is kept for the retry in %v): %v", e.Job, e.RetryIn, e.Err)
}

// Unwrap returns the handler's error.
func (e *RetryError) Unwrap() error { return e.Err }

// BusyError is what a scheduled task returns when an earlier run of the
// same tick still holds the job's lock: typically a handler that outlived
// its deadline, which asynq retried. The task is re-queued to try again
// after RetryIn; with IsFailure in the server's Config that spends no
// retry. errors.Is(err, limiter.ErrBusy) is true for it.
type BusyError struct {
	Job     string
	RetryIn time.Duration
}

// Error says which job's lock an earlier run still holds.
func (e *BusyError) Error() string {
	return fmt.Sprintf("redsem scheduler: an earlier run of job %s still holds its lock; retry in %v", e.Job, e.RetryIn)
}

// Is makes errors.Is(err, limiter.ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == limiter.ErrBusy }

// IsFailure returns a Config.IsFailure for asynq.Server: a *BusyError is
// not a failure (asynq re-queues the task without counting a retry);
// every other error is judged by next, or counted as a failure when next
// is nil (asynq's default). It composes with asynqmw.IsFailure:
// asynqmw.IsFailure(scheduler.IsFailure(nil)).
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

// RetryDelay returns a Config.RetryDelayFunc for asynq.Server: a
// *RetryError is retried after its RetryIn (the lock is kept that long,
// plus the job's TTL for the pick-up), a *BusyError after its RetryIn;
// every other error goes to next, or to asynq.DefaultRetryDelayFunc when
// next is nil. Without it, asynq picks its own delay, and a retry that
// comes more than the job's TTL after the kept lock's RetryIn finds the
// lock gone and is skipped. It composes with asynqmw.RetryDelay:
// asynqmw.RetryDelay(scheduler.RetryDelay(nil)).
func RetryDelay(next asynq.RetryDelayFunc) asynq.RetryDelayFunc {
	return func(n int, err error, t *asynq.Task) time.Duration {
		var retry *RetryError
		if errors.As(err, &retry) {
			return retry.RetryIn
		}
		var busy *BusyError
		if errors.As(err, &busy) {
			return busy.RetryIn
		}
		if next != nil {
			return next(n, err, t)
		}
		return asynq.DefaultRetryDelayFunc(n, err, t)
	}
}
