package asynqmw

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redsem/redsem/limiter"
)

// held is a permit a task holds, with the gate it is of.
type held struct {
	g     gate
	lease *limiter.Lease
}

// gated runs the handler next once the task holds a permit of every gate
// with a limit and a current slot of every gate with a rate, and returns
// what it returned, with ran set; else the *BusyError or the error that
// ended the wait.
//
// Permits first, then slots: a task that holds its permits reserves
// slots no further off than holdBound and sleeps until them holding the
// permits, so a slot always goes to a task that can use it (a slot
// reserved before the permits is lost when they come late, and one
// reserved by a task that then waits for a permit idles). A slot further
// off is a rate that serves more than these permits' holders (a pause,
// another rule sharing it): the task gives its permits back, reserves
// the slot, sleeps until it holding nothing, and starts over with it.
func (m *middleware) gated(ctx, wait context.Context, stopWait func(), t *asynq.Task, gs []gate, id limiter.AcquireOption, next asynq.Handler) (out error, ran bool) {
	var early []slot // slots reserved before the permits
	for {
		if err := m.sleep(wait, early); err != nil {
			return err, false
		}
		hs, err := m.acquireAll(ctx, wait, gs, id)
		if err != nil {
			m.giveBack(early)
			return err, false
		}
		slots, err := m.near(wait, gs, early)
		if err == nil {
			err = m.sleep(wait, slots)
		}
		if err == nil {
			stopWait() // every slot and permit held
			return m.runUnder(ctx, t, hs, next), true
		}
		m.releaseAll(hs)
		if !errors.Is(err, errFarSlot) {
			return err, false
		}
		if early, err = m.reserve(wait, gs); err != nil {
			return err, false
		}
	}
}

// acquireAll takes a permit of every gate with a limit, in the gates'
// order, each held while it waits for the next (list the narrowest
// rules first). A wait ends when wait does, when the gate's own
// AcquireTimeout runs out, or when an earlier permit is lost; then the
// permits taken are released and the error returned.
func (m *middleware) acquireAll(ctx, wait context.Context, gs []gate, id limiter.AcquireOption) ([]held, error) {
	var hs []held
	for i, g := range gs {
		if g.limit == 0 { // a rule with only a rate
			continue
		}
		lease, err := m.acquire(ctx, wait, hs, gs[i:], id)
		if err != nil {
			m.releaseAll(hs)
			return nil, err
		}
		hs = append(hs, held{g: g, lease: lease})
	}
	return hs, nil
}

// acquire waits for a permit of gs[0], under the lease id option id (the
// limiter's made-up id when nil), until ctx, the task's wait or the gate's AcquireTimeout
// ends, or a permit in hs is lost. With Park, a Key rule's task whose
// key is full while the later gates gs[1:] have room parks instead
// (a *BusyError with Parked set).
func (m *middleware) acquire(ctx, wait context.Context, hs []held, gs []gate, id limiter.AcquireOption) (*limiter.Lease, error) {
	g := gs[0]
	semOpts := g.r.semOpts
	if g.bound > 0 {
		// The limiter's own bound, so that a wait that runs out says
		// why (a *limiter.BusyError: full, paused, quarantined) and until when.
		semOpts = append(semOpts[:len(semOpts):len(semOpts)], limiter.AcquireTimeout(g.bound))
	}
	sem, err := m.client.Semaphore(g.name, g.limit, semOpts...)
	if err != nil {
		return nil, fmt.Errorf("asynqmw: %s: %w", g.name, err)
	}
	m.opts.metrics.gated(g.r.Name)
	opts := []limiter.AcquireOption{limiter.Weight(g.r.Weight)}
	if id != nil {
		opts = append(opts, id)
	}
	if m.parking != nil && g.r.Key != nil && !lastTry(ctx) {
		lease, leave, err := m.tryOrPark(ctx, wait, sem, opts, gs)
		if leave == nil {
			return lease, err
		}
		defer leave()
	}
	start := time.Now()
	waitCtx, lost := context.WithCancelCause(wait)
	defer lost(nil)
	// After the first permit, a wait also ends when an earlier one is
	// lost (wait already ends with the handler's ctx).
	for _, h := range hs {
		end := h.lease.Context()
		stop := context.AfterFunc(end, func() { lost(context.Cause(end)) })
		defer stop()
	}
	lease, err := func() (*limiter.Lease, error) {
		defer m.waiting.enter(g.name)() // counted while queued, whatever ends the wait
		return sem.Acquire(waitCtx, opts...)
	}()
	m.opts.metrics.waited(g.r.Name, time.Since(start))
	if err != nil {
		return nil, m.notAcquired(ctx, g, err)
	}
	return lease, nil
}

// notAcquired is what a task returns when its wait for g's permit ended
// with err: a *BusyError that re-queues it when the wait ran out, at the
// end of a pause or a restart quarantine (the limiter knows when), else
// after about AcquireTimeout; else what failed makes of err.
func (m *middleware) notAcquired(ctx context.Context, g gate, err error) error {
	var lb *limiter.BusyError
	switch {
	case errors.As(err, &lb) && (lb.Paused || lb.Restarted):
		m.opts.metrics.requeued(g.r.Name)
		return &BusyError{Semaphore: g.name, RetryIn: later(max(lb.RetryIn, minRetryIn)), Paused: lb.Paused, Err: err}
	case errors.Is(err, limiter.ErrBusy), errors.Is(err, errGateTimeout):
		return m.timedOut(g, err)
	}
	return m.failed(ctx, g, err)
}

// failed is what a task returns when the wait for g's permit or slot
// ended with err, neither busy nor timed out: err wrapped when the
// task's context ended, the Client closed, or the input is bad; else a
// *BusyError: the task did not run, and a Redis that is starting,
// failing over or restarted empty is no reason to spend a retry
// (MaxGated bounds how long). A permit taken earlier and lost while the
// task waited (a restart forgot it) brings the task back after about
// the TTL (the restart's quarantine); a Redis failure after about a
// second.
func (m *middleware) failed(ctx context.Context, g gate, err error) error {
	if ctx.Err() != nil || errors.Is(err, limiter.ErrClosed) || errors.Is(err, limiter.ErrInvalidArgument) ||
		(errors.Is(err, context.Canceled) && !errors.Is(err, limiter.ErrLeaseLost)) {
		return fmt.Errorf("asynqmw: %s: %w", g.name, err)
	}
	m.opts.metrics.requeued(g.r.Name)
	retryIn := jitter(unreachableRetryIn)
	if errors.Is(err, limiter.ErrLeaseLost) {
		retryIn = later(g.r.TTL)
	}
	return &BusyError{Semaphore: g.name, RetryIn: retryIn, Err: err}
}

// unreachableRetryIn is when a task whose Redis failed comes back.
const unreachableRetryIn = time.Second

// tryOrPark takes a permit of the Key rule's gate gs[0] of sem if one is
// free, or parks the task when its key is full. It returns leave instead
// when the task is to wait for the permit, counted among the key's
// waiters here until it calls leave: the later gates gs[1:] are full
// and few handlers wait for the key, the key is paused or in its restart
// quarantine (which no release ends), or the park failed.
func (m *middleware) tryOrPark(ctx, wait context.Context, sem *limiter.Semaphore, opts []limiter.AcquireOption, gs []gate) (lease *limiter.Lease, leave func(), err error) {
	g := gs[0]
	// Another handler here waits for the key: it is full (or that one is
	// being granted), so no first try. A pause or quarantine is then
	// found by the try before the park.
	if !m.waiting.queued(g.name) {
		lease, err = sem.TryAcquire(wait, opts...)
		var lb *limiter.BusyError
		switch {
		case err == nil:
			return lease, nil, nil
		case !errors.As(err, &lb):
			return nil, nil, m.failed(ctx, g, err)
		case lb.Paused || lb.Restarted:
			return nil, m.parking.wait(g.name), nil
		}
	}
	if leave, ok := m.parking.join(g.name, g.limit+1); ok {
		if !m.haveRoom(wait, gs[1:]) {
			// Everything is full: a few of this process's handlers (the
			// key's limit and one) wait for the key, so that its next
			// permits are taken at once; more would hold the slots that
			// other keys' tasks need to join the later gates' queues,
			// where the keys take turns.
			return nil, leave, nil
		}
		leave()
	}
	entry, ok := m.parking.park(ctx, g.name)
	if !ok {
		return nil, m.parking.wait(g.name), nil
	}
	// A release between the try and the park put back nobody: try once
	// more, now that the next release sees this task.
	lease, err = sem.TryAcquire(wait, opts...)
	var again *limiter.BusyError
	if !errors.As(err, &again) || again.Paused || again.Restarted {
		// Granted, failed, or a pause or quarantine (no release ends it)
		// began: not parked after all.
		m.parking.unlist(g.name, entry)
		switch {
		case err == nil:
			return lease, nil, nil
		case again != nil:
			return nil, m.parking.wait(g.name), nil
		}
		return nil, nil, m.failed(ctx, g, err)
	}
	m.opts.metrics.requeued(g.r.Name)
	return nil, nil, &BusyError{Semaphore: g.name, RetryIn: parkFor, Parked: true, Err: err}
}

// haveRoom reports whether every gate of gs with a limit would grant a
// permit now: it takes one of each and gives it back at once, unless a
// handler of this process waits in its queue (then it would not).
func (m *middleware) haveRoom(ctx context.Context, gs []gate) bool {
	for _, g := range gs {
		if g.limit == 0 {
			continue
		}
		if m.waiting.queued(g.name) {
			return false
		}
		sem, err := m.client.Semaphore(g.name, g.limit, g.r.semOpts...)
		if err != nil {
			return false
		}
		lease, err := sem.TryAcquire(ctx, limiter.Weight(g.r.Weight))
		if err != nil {
			return false
		}
		_ = lease.Release(context.WithoutCancel(ctx)) // bounded by ReleaseTimeout
		m.released(g)                                 // a task that parked on it meanwhile hears of it
	}
	return true
}

// bounded returns wait, ended after d with cause errGateTimeout unless d
// is 0.
func bounded(wait context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d == 0 {
		return context.WithCancel(wait)
	}
	return context.WithTimeoutCause(wait, d, errGateTimeout)
}

// releaseAll releases permits taken for a run that did not start, in
// reverse order; a failure is logged, and the permit comes back at its
// TTL.
func (m *middleware) releaseAll(hs []held) {
	for i := len(hs) - 1; i >= 0; i-- {
		if err := hs[i].lease.Release(context.Background()); err != nil && !errors.Is(err, limiter.ErrNotHeld) {
			m.opts.logger.Warn("asynqmw: release failed", "name", hs[i].g.name, "id", hs[i].lease.ID(), "err", err)
		}
		m.released(hs[i].g)
	}
}

// released puts back the first task parked on g's key (Park), whose
// permit was just released.
func (m *middleware) released(g gate) {
	if m.parking != nil && g.r.Key != nil {
		m.parking.unpark(g.name)
	}
}

// runUnder runs next under the leases, nested in the order they were
// taken (see run), and returns what next returned.
func (m *middleware) runUnder(ctx context.Context, t *asynq.Task, hs []held, next asynq.Handler) error {
	fn := func(ctx context.Context) error { return next.ProcessTask(ctx, t) }
	for i := len(hs) - 1; i >= 0; i-- {
		inner, h := fn, hs[i]
		fn = func(ctx context.Context) error {
			defer m.released(h.g)
			return m.run(ctx, t, h.lease, h.g, inner)
		}
	}
	return fn(ctx)
}

// run runs fn under the lease (see limiter.Lease.Run), which releases it
// when fn returns or panics (asynq recovers the panic), unless it was
// lost, and returns what fn returned: a loss is counted and logged, a
// failed release logged, and neither turns fn's success into a failure.
// A failure that the loss caused (the handler returned its context's
// end, or the loss itself: a Redis restarted empty, a forced release) is
// the fleet's, not the task's: the task is re-queued as busy, after
// about the TTL (a restart's quarantine), within MaxGated. A failure of
// the handler's own is returned as it is.
func (m *middleware) run(ctx context.Context, t *asynq.Task, lease *limiter.Lease, g gate, fn func(context.Context) error) (out error) {
	rule := g.r.Name
	defer func() { // also when the handler panicked
		lost := lease.Err()
		if !errors.Is(lost, limiter.ErrLeaseLost) {
			return
		}
		m.opts.metrics.lost(rule)
		m.opts.logger.Warn("asynqmw: lease lost while the handler ran", "task", t.Type(), "id", lease.ID(), "err", lost)
		if cutShort(out) {
			m.opts.metrics.requeued(rule)
			out = &BusyError{Semaphore: g.name, RetryIn: later(g.r.TTL), Err: fmt.Errorf("%w (%w)", out, lost)}
		}
	}()
	m.opts.metrics.runs(rule, 1)
	defer m.opts.metrics.runs(rule, -1)
	err := lease.Run(ctx, func(ctx context.Context) error {
		out = fn(ctx)
		return out
	})
	if errors.Is(err, limiter.ErrReleaseFailed) {
		// Not fatal: the permit comes back when the lease's TTL runs out.
		m.opts.logger.Warn("asynqmw: release failed", "task", t.Type(), "id", lease.ID(), "err", err)
	}
	return out
}

// cutShort reports whether a handler's error is what the end of its
// context made of it (or the loss of its lease), not a failure of its
// own.
func cutShort(err error) bool {
	return err != nil && !errors.Is(err, limiter.ErrBusy) &&
		(errors.Is(err, limiter.ErrLeaseLost) || errors.Is(err, context.Canceled))
}

// timedOut is the *BusyError of a task whose wait ran out at gate g: it
// comes back after about AcquireTimeout (at least 100ms), jittered.
func (m *middleware) timedOut(g gate, err error) *BusyError {
	m.opts.metrics.requeued(g.r.Name)
	return &BusyError{Semaphore: g.name, RetryIn: jitter(max(g.r.AcquireTimeout, minRetryIn)), Err: err}
}
