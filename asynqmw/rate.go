package asynqmw

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redsem/redsem/limiter"
)

// maxSlotLateness is how long after its rate slot a handler may start and
// still count as that slot's event. A handler that starts later (its
// permits came late) would bunch with the events after it: in any window
// of length w the rule's handlers start at most Burst + Events*(w +
// maxSlotLateness)/Per times. It is above what an uncontended permit
// costs (a round trip), so that the common case spends no second call.
const maxSlotLateness = 20 * time.Millisecond

// slot is the time a task reserved of one gate's rate.
type slot struct {
	g   gate
	rl  *limiter.RateLimit
	res *limiter.Reservation // nil once replaced by an event now (current)
	at  time.Time
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
		slots = append(slots, slot{g: g, rl: rl, res: res, at: res.Time()})
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

// sleep waits for the latest of the slots. If wait ends first it gives
// them back and returns what ended it: a *BusyError when the task's wait
// ran out, else the error wrapping the context's cause.
func (m *middleware) sleep(wait context.Context, slots []slot) error {
	if len(slots) == 0 {
		return nil
	}
	last := slots[0]
	for _, s := range slots {
		if s.at.After(last.at) {
			last = s
		}
	}
	d := time.Until(last.at)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-wait.Done():
		m.giveBack(slots)
		if cause := context.Cause(wait); errors.Is(cause, errGateTimeout) {
			busy := m.timedOut(last.g, cause)
			busy.Rate = true
			return busy
		}
		return fmt.Errorf("asynqmw: wait for a rate slot: %w", context.Cause(wait))
	}
}

// current makes every slot current before the handler starts: a slot
// that the permits made later than maxSlotLateness is replaced by an
// event now, when its rate has room now (one call to Redis). It reports
// false when one has none: the task must give its permits back and
// reserve anew, never holding them while it waits for a slot. A Redis
// failure is returned wrapped.
func (m *middleware) current(ctx context.Context, slots []slot) (bool, error) {
	for i := range slots {
		s := &slots[i]
		if time.Since(s.at) <= maxSlotLateness {
			continue
		}
		m.opts.metrics.slotUnused(s.g.r.Name)
		ok, err := s.rl.Allow(ctx)
		if err != nil {
			return false, fmt.Errorf("asynqmw: %s: %w", s.g.name, err)
		}
		if !ok {
			return false, nil
		}
		s.res, s.at = nil, time.Now()
	}
	return true, nil
}

// giveBack cancels the slots that have not come yet, so that a later
// task may have them (the limiter does when nothing was reserved after
// them); the others are spent unused, which only slows the rate.
func (m *middleware) giveBack(slots []slot) {
	for _, s := range slots {
		m.opts.metrics.slotUnused(s.g.r.Name)
		if s.res != nil {
			_, _ = s.res.Cancel(context.Background()) // bounded by ReleaseTimeout
		}
	}
}
