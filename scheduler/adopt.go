package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// Adopt returns the worker-side middleware, which resumes leases with lc
// (the scheduler's Redis and key prefix). Tasks without a Scheduler's
// ticket header pass through. A nil lc or bad option gives an error
// wrapping a *limiter.ArgumentError naming it, a closed lc
// limiter.ErrClosed.
//
// A run takes the tick's lease over (WorkerTTL, a new fencing token) and
// runs the handler under it (limiter.Lease.Run; limiter.LeaseFrom(ctx)).
// On loss the context is cancelled with cause limiter.ErrLeaseLost
// (logged). When the handler returns or panics the lease is released
// (failing: logged, the lock frees at the WorkerTTL) and the task returns
// the handler's error; but on an error asynq will retry, the lock is kept
// for the retry delay plus the job's TTL and the task returns an
// *asynqmw.RetryError with that delay (keeping failed: logged, released,
// the retry skipped).
//
// Not run: a task whose lock is gone returns an error wrapping
// asynq.SkipRetry and limiter.ErrNotHeld (a malformed ticket: SkipRetry,
// limiter.ErrInvalidArgument); one whose earlier run still holds the lock
// an *asynqmw.BusyError, re-queued without spending a retry; a Redis
// failure, the context's end or limiter.ErrClosed is returned for asynq
// to retry. Close lc after the asynq server: it cancels running handlers
// with cause limiter.ErrNotHeld. Why, and the edge cases: docs/design.md.
func Adopt(lc *limiter.Client, opts ...Option) (asynq.MiddlewareFunc, error) {
	if lc == nil {
		return nil, errorf("", &limiter.ArgumentError{Arg: "lc", Value: nil, Reason: "must not be nil"})
	}
	a := &adopter{lc: lc, opts: newOptions(opts)}
	if _, err := a.opts.lock(a.lc, "probe", 1, a.opts.ttl, true); err != nil { // validates the options now
		return nil, errorf("", err)
	}
	return a.wrap, nil
}

type adopter struct {
	lc   *limiter.Client
	opts options
}

// keepBudget bounds keeping a lock for a retry.
const keepBudget = 5 * time.Second

// handover is what a task's headers say about its lock.
type handover struct {
	job    string
	ticket limiter.Ticket
	limit  int64
	pickup time.Duration // the job's TTL
}

func parseHandover(h map[string]string) (handover, error) {
	ticket, err := limiter.ParseTicket(h[headerTicket])
	if err != nil {
		return handover{}, err
	}
	limit, err := strconv.ParseInt(h[headerLimit], 10, 64)
	if err != nil || limit < 1 {
		return handover{}, &limiter.ArgumentError{Arg: headerLimit, Value: h[headerLimit], Reason: "must be a number >= 1"}
	}
	pickup := defaultLockTTL
	if v, ok := h[headerTTL]; ok {
		if pickup, err = time.ParseDuration(v); err != nil || pickup <= 0 {
			return handover{}, &limiter.ArgumentError{Arg: headerTTL, Value: v, Reason: "must be a duration > 0"}
		}
	}
	return handover{job: h[headerJob], ticket: ticket, limit: limit, pickup: pickup}, nil
}

// errRunning: an earlier run of the tick still holds the lock.
var errRunning = errors.New("an earlier run still holds the lock")

func (a *adopter) wrap(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		if _, ok := t.Headers()[headerTicket]; !ok {
			return next.ProcessTask(ctx, t)
		}
		job := t.Headers()[headerJob]
		ho, err := parseHandover(t.Headers())
		var lease *limiter.Lease
		if err == nil {
			lease, err = a.adopt(ctx, ho)
		}
		switch {
		case errors.Is(err, errRunning):
			a.opts.metrics.add(job, EventAdoptBusy)
			a.opts.logger.Debug("redsem scheduler: task re-queued", "job", job, "task", t.Type(),
				"reason", "an earlier run still holds the lock")
			return &asynqmw.BusyError{Semaphore: ho.ticket.Name, RetryIn: max(a.opts.ttl/2, 100*time.Millisecond),
				Err: fmt.Errorf("redsem scheduler: an earlier run of job %s still holds its lock", job)}
		case errors.Is(err, limiter.ErrNotHeld) || errors.Is(err, limiter.ErrInvalidArgument):
			a.opts.metrics.add(job, EventAdoptFailed)
			a.opts.logger.Warn("redsem scheduler: task skipped", "job", job, "task", t.Type(), "reason", "lock not held", "err", err)
			return fmt.Errorf("%w: %w", asynq.SkipRetry, err)
		case err != nil:
			return err
		}
		a.opts.metrics.add(job, EventAdopted)
		var out error  // what the task returns
		defer func() { // also when the handler panicked; a parked lease ends as not held, not lost
			if lost := lease.Err(); errors.Is(lost, limiter.ErrLeaseLost) {
				a.opts.logger.Warn("redsem scheduler: lock lost", "job", job, "task", t.Type(), "while", "the job ran", "err", lost)
			}
		}()
		err = lease.Run(ctx, func(ctx context.Context) error {
			herr := next.ProcessTask(ctx, t)
			out = herr
			if herr != nil && willRetry(ctx, herr) && lease.Err() == nil {
				if r := a.keep(ctx, lease, ho, t, herr); r != nil {
					out = r
				}
			}
			return herr
		})
		if errors.Is(err, limiter.ErrReleaseFailed) {
			a.opts.logger.Warn("redsem scheduler: release failed", "job", job, "then", "the lock frees at its TTL", "err", err)
		}
		return out
	})
}

// willRetry reports whether asynq will retry a task that returned err.
func willRetry(ctx context.Context, err error) bool {
	n, ok1 := asynq.GetRetryCount(ctx)
	max, ok2 := asynq.GetMaxRetry(ctx)
	return ok1 && ok2 && n < max && !errors.Is(err, asynq.SkipRetry) && !errors.Is(err, asynq.RevokeTask)
}

// adopt takes the tick's lock over: from the ticket on a first run, or
// from where a failed earlier run parked it (limiter.Lease.Park: any
// ticket of the id takes a parked lease). It returns an error matching
// limiter.ErrNotHeld when the lock is gone, errRunning when an earlier
// run still holds it.
func (a *adopter) adopt(ctx context.Context, ho handover) (*limiter.Lease, error) {
	sem, err := a.opts.lock(a.lc, ho.ticket.Name, ho.limit, a.opts.ttl, true)
	if err != nil {
		return nil, err
	}
	lease, err := sem.Resume(ctx, ho.ticket)
	if !errors.Is(err, limiter.ErrNotHeld) {
		return lease, err
	}
	holders, herr := inspect.New(a.lc).Holders(ctx, ho.ticket.Name)
	if herr != nil {
		return nil, herr
	}
	if slices.ContainsFunc(holders, func(h inspect.Holder) bool { return h.ID == ho.ticket.ID }) {
		return nil, errRunning
	}
	return nil, err
}

// keep parks the lease, whose handler failed, for asynq's retry: held by
// no process, unrefreshed, for the retry delay plus the pick-up, so that
// the retry's Resume of the task's ticket takes it over. It returns the
// task's error, or nil if the lock could not be kept (Run then releases
// it by its old token, which no longer matches if the park landed after
// all: then the retry still finds it parked).
func (a *adopter) keep(ctx context.Context, lease *limiter.Lease, ho handover, t *asynq.Task, herr error) *asynqmw.RetryError {
	n, _ := asynq.GetRetryCount(ctx)
	delay := max(a.opts.retryDelay(n, herr, t), 0)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), keepBudget)
	defer cancel()
	if err := lease.Park(ctx, delay+ho.pickup); err != nil {
		a.opts.logger.Warn("redsem scheduler: keeping the lock failed", "job", ho.job, "task", t.Type(),
			"for", "the retry", "then", "released and the retry skipped, unless the park landed after all", "err", err)
		return nil
	}
	a.opts.metrics.add(ho.job, EventKept)
	return &asynqmw.RetryError{RetryIn: delay,
		Err: fmt.Errorf("redsem scheduler: job %s failed (its lock is kept for the retry): %w", ho.job, herr)}
}
