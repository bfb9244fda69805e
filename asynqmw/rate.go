package asynqmw

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/redsem/redsem/limiter"
)

// slot is the time a task reserved of one gate's rate.
type slot struct {
	g   gate
	res *limiter.Reservation
}

// errFarSlot ends a task's attempt to run on the permits it holds: a
// slot of one of its rates is further off than holdBound.
var errFarSlot = errors.New("asynqmw: rate slot too far off to wait for holding permits")

// maxHoldForSlot bounds holdBound.
const maxHoldForSlot = time.Second

// holdBound is how long a task holding its permits waits for g's slot:
// as long as rate (the one the fleet applies) takes to serve one more
// than the largest limit among the task's gates, i.e. every holder of
// those permits and the task (between Lateness and maxHoldForSlot). A
// slot further off is held up by more than those holders, and the
// permits are better given back.
func holdBound(g gate, gs []gate, rate limiter.Rate) time.Duration {
	most := int64(1)
	for _, h := range gs {
		most = max(most, h.limit)
	}
	return min(max(time.Duration(most+1)*interval(rate), limiter.Lateness), maxHoldForSlot)
}

// near gives the task, which now holds its permits, a current slot of
// every gate with a rate, in the gates' order: the early slot reserved
// for it, if still current or renewed (limiter.Reservation.Renew), else
// a new one no further off than holdBound when the task holds permits.
// A slot further off gives back the slots taken and returns errFarSlot;
// any other error, what rateError makes of it.
func (m *middleware) near(wait context.Context, gs []gate, early []slot) ([]slot, error) {
	var slots []slot
	holding := slices.ContainsFunc(gs, func(g gate) bool { return g.limit > 0 })
	for _, g := range gs {
		if !g.r.hasRate() {
			continue
		}
		if i := slices.IndexFunc(early, func(s slot) bool { return s.g.name == g.name }); i >= 0 {
			s := early[i]
			if time.Since(s.res.Time()) > limiter.Lateness {
				m.opts.metrics.slotUnused(g.r.Name)
			}
			ok, err := s.res.Renew(wait)
			if err != nil {
				m.giveBack(slots)
				return nil, m.rateError(wait, g, err) // the wait's end is a time-out, not a failure
			}
			if ok {
				slots = append(slots, s)
				continue
			}
		}
		s, err := m.reserveHolding(wait, g, gs, holding)
		var lb *limiter.BusyError
		if holding && errors.As(err, &lb) {
			err = errFarSlot
		}
		if err != nil {
			m.giveBack(slots)
			if errors.Is(err, errFarSlot) {
				return nil, err
			}
			return nil, m.rateError(wait, g, err)
		}
		slots = append(slots, s)
	}
	return slots, nil
}

// reserveHolding reserves a slot of g no further off than its rule's
// AcquireTimeout and, when the task holds permits, holdBound at the rate
// the fleet applies. A slot further off than the cached rate put it
// while not paused reads that rate again (appliedRates) and, when it is
// slower, tries once more with its bound.
func (m *middleware) reserveHolding(wait context.Context, g gate, gs []gate, holding bool) (slot, error) {
	bound := func(rate limiter.Rate) time.Duration {
		if hb := holdBound(g, gs, rate); holding && (g.bound == 0 || hb < g.bound) {
			return hb
		}
		return g.bound
	}
	rate := m.applied.get(g)
	s, err := m.reserveOne(wait, g, bound(rate))
	var lb *limiter.BusyError
	if holding && errors.As(err, &lb) && !lb.Paused {
		if now := m.applied.refresh(wait, m.client, g); interval(now) > interval(rate) {
			s, err = m.reserveOne(wait, g, bound(now))
		}
	}
	return s, err
}

// reserve reserves a slot of every gate with a rate, in the gates'
// order, each no further off than its rule's AcquireTimeout and what is
// left of wait. When one would be further off (a *limiter.BusyError), or
// fails, it gives back the slots it took and returns the error: a
// *BusyError when the rate was busy or wait ran out, else the failure
// wrapped.
func (m *middleware) reserve(wait context.Context, gs []gate) ([]slot, error) {
	var slots []slot
	for _, g := range gs {
		if !g.r.hasRate() {
			continue
		}
		s, err := m.reserveOne(wait, g, g.bound)
		if err != nil {
			m.giveBack(slots)
			return nil, m.rateError(wait, g, err)
		}
		slots = append(slots, s)
	}
	return slots, nil
}

// reserveOne reserves a slot of g's rate no further off than bound (0:
// none) and what is left of wait.
func (m *middleware) reserveOne(wait context.Context, g gate, bound time.Duration) (slot, error) {
	rl, err := m.client.RateLimit(g.name, g.r.Rate, g.r.rateOpts...)
	if err != nil {
		return slot{}, err
	}
	ctx, cancel := bounded(wait, bound)
	defer cancel()
	res, err := rl.ReserveN(ctx, 1)
	if err != nil {
		return slot{}, err
	}
	m.opts.metrics.rateWaited(g.r.Name, res.Delay())
	return slot{g: g, res: res}, nil
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
	return m.failed(wait, g, err)
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
		if d := slots[last].res.Delay(); d > 0 {
			busy.RetryIn = later(d) // a pause moved the slot on: come back then
		}
		return busy
	}
	return m.failed(wait, slots[last].g, err)
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
