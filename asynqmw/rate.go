package asynqmw

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redsem/redsem/limiter"
)

// slot is the time a task reserved of one gate's rate.
type slot struct {
	g   gate
	res *limiter.Reservation
}

// reserve reserves a slot of every gate with a rate, in the gates' order,
// each bounded by what is left of wait. When one would wait past it (a
// *limiter.BusyError), or fails, it gives back the slots it took and
// returns the error: a *BusyError when the rate was busy or wait ran out,
// else the failure wrapped.
func (m *middleware) reserve(wait context.Context, gs []gate) ([]slot, error) {
	var slots []slot
	for _, g := range gs {
		if !g.r.hasRate() {
			continue
		}
		rl, err := m.client.RateLimit(g.name, g.r.Rate, g.r.rateOpts...)
		var res *limiter.Reservation
		if err == nil {
			res, err = rl.ReserveN(wait, 1)
		}
		if err != nil {
			m.giveBack(slots)
			return nil, m.rateError(wait, g, err)
		}
		m.opts.metrics.rateWaited(g.r.Name, res.Delay())
		slots = append(slots, slot{g: g, res: res})
	}
	return slots, nil
}

// rateError turns what ended a reservation of g into what the task
// returns: a busy rate re-queues the task when it would have had its
// slot (RetryIn, spread over [1, 1½)×), wait running out after about
// AcquireTimeout as for a permit.
func (m *middleware) rateError(wait context.Context, g gate, err error) error {
	var lb *limiter.BusyError
	switch {
	case errors.As(err, &lb):
		m.opts.metrics.requeued(g.r.Name)
		d := max(lb.RetryIn, minRetryIn)
		return &BusyError{Semaphore: g.name, RetryIn: later(d), Rate: true, Paused: lb.Paused, Err: err}
	case wait.Err() != nil && errors.Is(context.Cause(wait), errGateTimeout):
		busy := m.timedOut(g, err)
		busy.Rate = true
		return busy
	}
	return fmt.Errorf("asynqmw: %s: %w", g.name, err)
}

// sleep waits for the latest of the slots (limiter.Reservation.Wait).
// If wait ends first it gives them back and returns what ended it: a
// *BusyError when the task's wait ran out, else the error wrapping the
// context's cause (or limiter.ErrClosed when the Client closed).
func (m *middleware) sleep(wait context.Context, slots []slot) error {
	if len(slots) == 0 {
		return nil
	}
	last := 0
	for i, s := range slots {
		if s.res.Time().After(slots[last].res.Time()) {
			last = i
		}
	}
	err := slots[last].res.Wait(wait)
	if err == nil {
		return nil
	}
	// Wait gave the latest back where it could; a second Cancel might
	// take the time of a task that reserved after it.
	m.opts.metrics.slotUnused(slots[last].g.r.Name)
	m.giveBack(slices.Delete(slices.Clone(slots), last, last+1))
	if errors.Is(err, errGateTimeout) {
		busy := m.timedOut(slots[last].g, err)
		busy.Rate = true
		return busy
	}
	return fmt.Errorf("asynqmw: wait for a rate slot: %w", err)
}

// current makes every slot current before the handler starts
// (limiter.Reservation.Renew): a slot that the permits made later than
// limiter.Lateness is replaced by an event now, when its rate has room
// now (one call to Redis). It reports false when one has none: the task
// must give its permits back and reserve anew, never holding them while
// it waits for a slot. A Redis failure is returned wrapped.
func (m *middleware) current(ctx context.Context, slots []slot) (bool, error) {
	for _, s := range slots {
		if time.Since(s.res.Time()) > limiter.Lateness {
			m.opts.metrics.slotUnused(s.g.r.Name)
		}
		ok, err := s.res.Renew(ctx)
		if err != nil {
			return false, fmt.Errorf("asynqmw: %s: %w", s.g.name, err)
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// giveBack cancels the slots that have not come yet, so that a later
// task may have them (the limiter does when nothing was reserved after
// them); the others are spent unused, which only slows the rate. A slot
// renewed (current) has come: Cancel leaves it.
func (m *middleware) giveBack(slots []slot) {
	for _, s := range slots {
		m.opts.metrics.slotUnused(s.g.r.Name)
		_, _ = s.res.Cancel(context.Background()) // bounded by ReleaseTimeout
	}
}
