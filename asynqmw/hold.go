package asynqmw

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redsem/redsem/limiter"
)

// gated runs the handler next once the task has a slot of the rate of
// every gate that has one and holds a permit of every gate's semaphore,
// and returns what it returned, with ran set; else the *BusyError or the
// error that ended the wait. It reserves the slots first (bounded by
// wait), sleeps until them holding nothing, then takes the permits: a
// task never holds a permit while it waits for a slot. When the permits
// came too late for a slot and its rate has no room now, it gives them
// back and starts over (see current), until wait ends.
func (m *middleware) gated(ctx, wait context.Context, stopWait func(), t *asynq.Task, gs []gate, id string, next asynq.Handler) (out error, ran bool) {
	for {
		slots, err := m.reserve(wait, gs)
		if err == nil {
			err = m.sleep(wait, slots)
		}
		if err != nil {
			return err, false
		}
		out, ran, late := m.hold(ctx, wait, stopWait, t, gs, slots, id, next)
		if !late {
			return out, ran
		}
	}
}

// hold takes the permits of gs in order, each held while it takes the
// next (list the narrowest rules first), and runs next under them once
// the slots are current: ran says it did. late says a slot was not
// current and its rate had no room: nothing ran and the permits are back.
func (m *middleware) hold(ctx, wait context.Context, stopWait func(), t *asynq.Task, gs []gate, slots []slot, id string, next asynq.Handler) (out error, ran, late bool) {
	var through func(ctx context.Context, i int)
	through = func(ctx context.Context, i int) {
		if i == len(gs) {
			ok, err := m.current(ctx, slots)
			if !ok {
				out, late = err, err == nil
				return
			}
			stopWait() // every slot and permit held
			ran = true
			out = next.ProcessTask(ctx, t)
			return
		}
		if gs[i].limit == 0 { // a rule with only a rate
			through(ctx, i+1)
			return
		}
		lease, err := m.acquire(ctx, wait, gs[i], id)
		if err != nil {
			m.giveBack(slots)
			out = err
			return
		}
		m.run(ctx, t, lease, gs[i].r.Name, func(ctx context.Context) error {
			through(ctx, i+1)
			return out
		})
	}
	through(ctx, 0)
	return out, ran, late
}

// acquire waits for a permit of g, under the lease id id (random when
// empty), until ctx or the task's wait ends.
func (m *middleware) acquire(ctx, wait context.Context, g gate, id string) (*limiter.Lease, error) {
	sem, err := m.client.Semaphore(g.name, g.limit, g.r.semOpts...)
	if err != nil {
		return nil, fmt.Errorf("asynqmw: %s: %w", g.name, err)
	}
	m.opts.metrics.gated(g.r.Name)
	opts := []limiter.AcquireOption{limiter.Weight(g.r.Weight)}
	if id != "" {
		opts = append(opts, limiter.ID(id))
	}
	start := time.Now()
	// wait bounds it, and ctx too: after the first permit, ctx is the
	// earlier lease's (ended if that lease is lost).
	waitCtx, cancel := context.WithCancelCause(wait)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	lease, err := sem.Acquire(waitCtx, opts...)
	stop()
	cancel(nil)
	m.opts.metrics.waited(g.r.Name, time.Since(start))
	if err != nil {
		if errors.Is(err, errGateTimeout) {
			if busy := m.pausedPermit(ctx, g, err); busy != nil {
				return nil, busy
			}
			return nil, m.timedOut(g, err)
		}
		return nil, fmt.Errorf("asynqmw: %s: %w", g.name, err)
	}
	return lease, nil
}

// pausedPermit is the *BusyError of a task whose wait for a permit of g
// ran out while g's name is paused (limiter.Inspector.Pause: its
// semaphore grants nothing new until then), or nil when it is not: the
// task comes back at the pause's end (spread over [1, 1½)×), as for a
// paused rate, rather than after AcquireTimeout to find it still paused.
// The semaphore's wait does not say why it ended, so the pause is read
// from Redis: one call, on this path only, bounded by pauseTimeout; if it
// fails, the task is re-queued as for a full semaphore.
func (m *middleware) pausedPermit(ctx context.Context, g gate, err error) *BusyError {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pauseTimeout)
	defer cancel()
	st, rerr := m.client.Inspector().Rate(ctx, g.name)
	if rerr != nil || st.Paused <= 0 {
		return nil
	}
	m.opts.metrics.requeued(g.r.Name)
	return &BusyError{Semaphore: g.name, RetryIn: later(max(st.Paused, minRetryIn)), Paused: true, Err: err}
}

// run runs fn under the lease (see limiter.Lease.Run), which releases it
// when fn returns or panics (asynq recovers the panic), unless it was
// lost; a loss is counted and logged, a failed release logged.
func (m *middleware) run(ctx context.Context, t *asynq.Task, lease *limiter.Lease, rule string, fn func(context.Context) error) {
	defer func() { // also when the handler panicked
		if lost := lease.Err(); errors.Is(lost, limiter.ErrLeaseLost) {
			m.opts.metrics.lost(rule)
			m.opts.logger.Warn("asynqmw: lease lost while the handler ran", "task", t.Type(), "id", lease.ID(), "err", lost)
		}
	}()
	m.opts.metrics.runs(rule, 1)
	defer m.opts.metrics.runs(rule, -1)
	err := lease.Run(ctx, fn)
	if errors.Is(err, limiter.ErrReleaseFailed) {
		// Not fatal: the permit comes back when the lease's TTL runs out.
		m.opts.logger.Warn("asynqmw: release failed", "task", t.Type(), "id", lease.ID(), "err", err)
	}
}

// timedOut is the *BusyError of a task whose wait ran out at gate g: it
// comes back after about AcquireTimeout (at least 100ms), jittered.
func (m *middleware) timedOut(g gate, err error) *BusyError {
	m.opts.metrics.requeued(g.r.Name)
	return &BusyError{Semaphore: g.name, RetryIn: jitter(max(g.r.AcquireTimeout, minRetryIn)), Err: err}
}
