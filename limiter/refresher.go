package limiter

import (
	"context"
	"sync"
	"time"
)

// refresher keeps every auto-refreshed lease of one store alive. Leases due
// within a fifth of their interval are refreshed together, so a process
// holding many leases sends one pipeline per round rather than one round
// trip per lease. Its goroutine runs only while it has leases.
type refresher struct {
	st      store
	mu      sync.Mutex
	leases  map[*Lease]struct{}
	running bool
	kick    chan struct{}
}

func newRefresher(st store) *refresher {
	return &refresher{st: st, leases: map[*Lease]struct{}{}, kick: make(chan struct{}, 1)}
}

func (r *refresher) add(l *Lease) {
	r.mu.Lock()
	r.leases[l] = struct{}{}
	if !r.running {
		r.running = true
		go r.loop()
	}
	r.mu.Unlock()
	r.wake()
}

func (r *refresher) remove(l *Lease) {
	r.mu.Lock()
	delete(r.leases, l)
	empty := len(r.leases) == 0
	r.mu.Unlock()
	if empty {
		r.wake() // let the goroutine exit now rather than at its next timer
	}
}

func (r *refresher) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *refresher) loop() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		batch, next, ok := r.due(time.Now())
		if !ok {
			return
		}
		if len(batch) > 0 {
			r.refresh(batch)
			continue
		}
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-r.kick:
		}
	}
}

// due returns the leases to refresh now, or when the next one falls due.
// ok is false when there is nothing left to keep alive.
func (r *refresher) due(now time.Time) (batch []*Lease, next time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.leases) == 0 {
		r.running = false
		return nil, next, false
	}
	next = now.Add(time.Hour)
	for l := range r.leases {
		at, slack := l.refreshDue()
		if !at.After(now.Add(slack)) {
			batch = append(batch, l)
		} else if at.Before(next) {
			next = at
		}
	}
	return batch, next, true
}

func (r *refresher) refresh(batch []*Lease) {
	sent := time.Now()
	var deadline time.Time
	reqs := make([]refreshRequest, len(batch))
	for i, l := range batch {
		reqs[i] = l.refreshRequest()
		deadline = maxTime(deadline, l.localDeadline())
	}
	// A reply after every lease's local deadline is useless, and a hung
	// server must not stall the refresher longer (go-redis honours the
	// context on the socket only with ContextTimeoutEnabled, so within
	// enforces it).
	ctx, cancel := context.WithDeadline(context.Background(), maxTime(deadline, sent.Add(10*time.Millisecond)))
	replies, err := within(ctx, func() ([]refreshReply, error) { return r.st.refresh(ctx, reqs), nil })
	cancel()
	if err != nil {
		replies = make([]refreshReply, len(reqs))
		for i := range replies {
			replies[i].err = err
		}
	}
	for i, l := range batch {
		l.refreshed(sent, replies[i])
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
