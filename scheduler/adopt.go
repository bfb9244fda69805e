package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/hibiken/asynq"

	"github.com/redsem/redsem/limiter"
)

// Adopt returns the worker-side middleware (see the package doc), which
// resumes leases with semaphores of lc. lc must reach the scheduler's
// Redis, with the same key prefix (LimiterOptions). Tasks without a
// ticket header pass straight through. A nil lc gives a
// *limiter.ArgumentError naming it, a bad option the limiter's
// *ArgumentError, a closed lc limiter.ErrClosed; nothing is sent to Redis.
//
// A ticket whose lease is gone makes the task return an error wrapping
// asynq.SkipRetry and limiter.ErrNotHeld: it is archived, never run. A
// malformed ticket is skipped the same way. A Redis failure while resuming
// (wrapped), or limiter.ErrClosed once lc is closed, is returned, so asynq
// retries the task.
//
// The handler runs under the adopted lease (limiter.Lease.Run), kept alive
// with the WorkerTTL; limiter.LeaseFrom(ctx) gives it the lease, for its
// fencing token. If the lease is lost, the handler's context is cancelled
// with cause limiter.ErrLeaseLost and the loss is logged. When the handler
// returns or panics, the lease is released, whatever it returns and also
// when asynq has given up on it (its retry cannot resume the same ticket:
// adopting gave the lease a new token); a failed release is logged and
// the lock frees at the WorkerTTL. The task returns what the handler
// returned. Close lc after the asynq server has shut down: its Close
// releases the leases of handlers still running, cancelling their
// contexts with cause limiter.ErrNotHeld.
func Adopt(lc *limiter.Client, opts ...Option) (asynq.MiddlewareFunc, error) {
	if lc == nil {
		return nil, &limiter.ArgumentError{Arg: "lc", Value: nil, Reason: "must not be nil"}
	}
	a := &adopter{lc: lc, opts: newOptions(opts), sems: map[string]*limiter.Semaphore{}}
	if _, err := a.semaphore("probe", 1); err != nil { // validates the options now
		return nil, err
	}
	return a.wrap, nil
}

type adopter struct {
	lc   *limiter.Client
	opts options
	mu   sync.Mutex
	sems map[string]*limiter.Semaphore
}

func (a *adopter) semaphore(name string, limit int64) (*limiter.Semaphore, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := name + "/" + strconv.FormatInt(limit, 10)
	if sem, ok := a.sems[key]; ok {
		return sem, nil
	}
	opts := append(slices.Clone(a.opts.limiterOpts), limiter.TTL(a.opts.ttl))
	sem, err := a.lc.Semaphore(name, limit, opts...)
	if err != nil {
		return nil, err
	}
	a.sems[key] = sem
	return sem, nil
}

func (a *adopter) wrap(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		text, ok := t.Headers()[HeaderTicket]
		if !ok {
			return next.ProcessTask(ctx, t)
		}
		job := t.Headers()[HeaderJob]
		lease, err := a.resume(ctx, text, t.Headers()[HeaderLimit])
		if err != nil {
			if errors.Is(err, limiter.ErrNotHeld) || errors.Is(err, limiter.ErrInvalidArgument) {
				a.opts.metrics.add(job, EventAdoptFailed)
				a.opts.logger.Warn("redsem scheduler: lock not held, task skipped", "job", job, "task", t.Type(), "err", err)
				return fmt.Errorf("%w: %w", asynq.SkipRetry, err)
			}
			return err
		}
		a.opts.metrics.add(job, EventAdopted)
		defer func() { // also when the handler panicked
			if lost := lease.Err(); errors.Is(lost, limiter.ErrLeaseLost) {
				a.opts.logger.Warn("redsem scheduler: lock lost while the job ran", "job", job, "task", t.Type(), "err", lost)
			}
		}()
		var herr error // the handler's own error, returned unchanged
		err = lease.Run(ctx, func(ctx context.Context) error {
			herr = next.ProcessTask(ctx, t)
			return herr
		})
		var rerr *limiter.ReleaseError
		if errors.As(err, &rerr) {
			a.opts.logger.Warn("redsem scheduler: release failed; the lock frees at its TTL", "job", job, "err", rerr)
		}
		return herr
	})
}

func (a *adopter) resume(ctx context.Context, text, limitText string) (*limiter.Lease, error) {
	ticket, err := limiter.ParseTicket(text)
	if err != nil {
		return nil, err
	}
	limit, err := strconv.ParseInt(limitText, 10, 64)
	if err != nil || limit < 1 {
		return nil, &limiter.ArgumentError{Arg: HeaderLimit, Value: limitText, Reason: "must be a number >= 1"}
	}
	sem, err := a.semaphore(ticket.Name, limit)
	if err != nil {
		return nil, err
	}
	return sem.Resume(ctx, ticket)
}
