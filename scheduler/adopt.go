package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter"
)

// Adopt returns the worker-side middleware (see the package doc). Tasks
// without a ticket header pass straight through. rdb must reach the
// scheduler's Redis, with the same key prefix (LimiterOptions).
//
// A ticket whose lease is gone makes the task return an error wrapping
// asynq.SkipRetry and limiter.ErrNotHeld: it is archived, never run. A
// malformed ticket is skipped the same way. A Redis failure while resuming
// is returned wrapped, so asynq retries the task.
func Adopt(rdb redis.UniversalClient, opts ...Option) (asynq.MiddlewareFunc, error) {
	a := &adopter{rdb: rdb, opts: newOptions(opts), sems: map[string]*limiter.Semaphore{}}
	if _, err := a.semaphore("probe", 1); err != nil { // validates rdb and options now
		return nil, err
	}
	return a.wrap, nil
}

type adopter struct {
	rdb  redis.UniversalClient
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
	sem, err := limiter.NewSemaphore(a.rdb, name, limit, opts...)
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
		defer func() {
			if ctx.Err() != nil {
				// asynq gave up on this run and may run the task again,
				// resuming the same ticket: releasing would take the
				// lock from that run. Let the lease lapse after its TTL.
				lease.StopRefresh()
				return
			}
			relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.opts.release)
			defer cancel()
			if err := lease.Release(relCtx); err != nil && !errors.Is(lease.Err(), limiter.ErrLeaseLost) {
				a.opts.logger.Warn("redsem scheduler: release failed; the lock frees at its TTL", "job", job, "err", err)
			}
		}()
		runCtx, cancel := context.WithCancelCause(context.WithValue(ctx, leaseKey{}, lease))
		defer cancel(nil)
		stop := context.AfterFunc(lease.Context(), func() { cancel(context.Cause(lease.Context())) })
		defer stop()
		return next.ProcessTask(runCtx, t)
	})
}

type leaseKey struct{}

// LeaseFrom returns the lease an adopting worker holds for the task being
// handled, e.g. to pass its fencing token (lease.Token()) to the resource
// the job writes to.
func LeaseFrom(ctx context.Context) (*limiter.Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(*limiter.Lease)
	return l, ok
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
