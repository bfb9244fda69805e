package limiter

import (
	"container/heap"
	"context"
	"time"
)

// refresher keeps alive everything one Client holds or waits for: leases
// (every RefreshInterval) and queue entries (every queueTTL/3). Entries are
// kept in a heap by due time; those due together are sent together, one
// script call per semaphore, so a Client holding 10,000 leases of one name
// sends a handful of calls per round, not 10,000. Its goroutine runs
// while it has entries and exits at its next timer after the last one
// left: adding or removing an entry wakes it only when the entry is due
// before its timer, so a lease acquired and released costs it nothing.
type refresher struct {
	c       *Client
	entries entryHeap
	byOwner map[any]*entry
	running bool
	wakeAt  time.Time // when the sleeping goroutine's timer fires
	// lingerUntil is the due time of the entry that started the
	// goroutine, which stays until then even if that entry left first,
	// as it would had it been running: a lease released before a new
	// goroutine gets to run would otherwise cost a goroutine and a timer.
	lingerUntil time.Time
	kick        chan struct{}
}

// entry is a lease or a waiter in the refresher.
type entry struct {
	lease    *Lease
	waiter   *waiter
	due      time.Time
	interval time.Duration
	index    int // in the heap; -1 while being refreshed or after removal
	removed  bool
}

func (e *entry) keys() keyspace {
	if e.lease != nil {
		return e.lease.sem.keys
	}
	return e.waiter.sem.keys
}

// queueTTL is how long a queue entry lives unless its Client keeps it
// alive: a dead process's waiters leave the queue within it.
const queueTTL = 3 * time.Second

func newRefresher(c *Client) *refresher {
	return &refresher{c: c, byOwner: map[any]*entry{}, kick: make(chan struct{}, 1)}
}

// addLease keeps l alive from due on, unless it already ended.
func (r *refresher) addLease(l *Lease, due time.Time) {
	// In the Lease, saving an allocation: newLease adds a lease once.
	l.refreshEntry = entry{lease: l, due: due, interval: l.sem.cfg.refresh}
	r.add(l, &l.refreshEntry, func() bool { return l.Err() == nil })
}

func (r *refresher) addWaiter(w *waiter) {
	r.add(w, &entry{waiter: w, due: time.Now().Add(queueTTL / 3), interval: queueTTL / 3}, func() bool { return true })
}

func (r *refresher) add(owner any, e *entry, live func() bool) {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	// Checked under the lock remove takes, so an end racing with this
	// add either comes first (nothing added) or removes what was added.
	if r.c.closed || !live() || r.byOwner[owner] != nil {
		return
	}
	r.byOwner[owner] = e
	heap.Push(&r.entries, e)
	switch {
	case !r.running:
		r.running = true
		r.lingerUntil = e.due
		r.c.spawn(r.loop)
	case e.due.Before(r.wakeAt):
		r.wake()
	}
}

func (r *refresher) remove(owner any) {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	e := r.byOwner[owner]
	if e == nil {
		return
	}
	delete(r.byOwner, owner)
	e.removed = true
	if e.index >= 0 {
		heap.Remove(&r.entries, e.index)
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
		case <-r.c.ctx.Done():
			r.c.mu.Lock()
			r.running = false
			r.c.mu.Unlock()
			return
		}
	}
}

// due takes out the entries to refresh now: those due within half their
// interval, so entries that fall due close together go together (and,
// after one round, stay together). Early is harmless: a refresh only
// extends.
// ok is false when there is nothing left to keep alive.
func (r *refresher) due(now time.Time) (batch []*entry, next time.Time, ok bool) {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	if r.c.ctx.Err() != nil || len(r.byOwner) == 0 && !now.Before(r.lingerUntil) {
		r.running = false
		return nil, next, false
	}
	if len(r.byOwner) == 0 {
		r.wakeAt = r.lingerUntil
		return nil, r.wakeAt, true
	}
	for len(r.entries) > 0 {
		e := r.entries[0]
		if e.due.Sub(now) > e.interval/2 {
			r.wakeAt = e.due
			return batch, e.due, true
		}
		heap.Pop(&r.entries)
		batch = append(batch, e)
	}
	// Entries being refreshed come back with a later due time.
	r.wakeAt = now.Add(time.Hour)
	return batch, r.wakeAt, true
}

// refresh sends one batch per semaphore and applies the answers.
func (r *refresher) refresh(entries []*entry) {
	sent := time.Now()
	deadline := sent.Add(queueTTL / 3)
	index := map[string]int{}
	var batches []refreshBatch
	var leases, waiters [][]*entry // per batch, in the order of its items
	for _, e := range entries {
		if l := e.lease; l != nil && l.pastMaxHold(sent) {
			// Let it lapse: it ends at its local deadline as lost.
			e.removed = true
			r.c.mu.Lock()
			delete(r.byOwner, l)
			r.c.mu.Unlock()
			continue
		}
		k := e.keys()
		i, ok := index[k.id()]
		if !ok {
			i = len(batches)
			index[k.id()] = i
			batches = append(batches, refreshBatch{keys: k})
			leases, waiters = append(leases, nil), append(waiters, nil)
		}
		if l := e.lease; l != nil {
			batches[i].leases = append(batches[i].leases, l.refreshItem())
			batches[i].replicas = batches[i].replicas.stricter(l.sem.cfg.replicas)
			leases[i] = append(leases[i], e)
			// A reply after every lease's local deadline is useless, and
			// a hung server must not stall the refresher longer.
			deadline = maxTime(deadline, l.localDeadline())
		} else {
			batches[i].waits = append(batches[i].waits, e.waiter.id)
			waiters[i] = append(waiters[i], e)
		}
	}
	if len(batches) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(r.c.ctx, deadline)
	results, err := bounded(r.c, ctx, func() ([]refreshResult, error) { return r.c.st.refresh(ctx, batches), nil })
	cancel()
	retry := map[*entry]bool{}
	for i := range batches {
		res := refreshResult{err: err}
		if err == nil {
			res = results[i]
		}
		for j, e := range leases[i] {
			held := res.err == nil && j < len(res.held) && res.held[j]
			if res.err != nil || e.lease.unconfirmed(held, res) != nil {
				retry[e] = true
				e.lease.refreshFailed()
			} else {
				e.lease.refreshed(sent, held)
			}
		}
		for j, e := range waiters[i] {
			switch {
			case res.err != nil:
				retry[e] = true
			case j < len(res.waits) && res.waits[j] != waiterQueued:
				if res.waits[j] == waiterFits {
					e.waiter.queued(sent, "")
				}
				e.waiter.signal() // gone: it queues again; fits: it tries now
			case j < len(res.waits):
				e.waiter.queued(sent, "")
			}
		}
	}
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	for _, e := range entries {
		if e.removed {
			continue
		}
		e.due = sent.Add(e.interval)
		if retry[e] {
			// Soon: the local deadline, not this failure, decides loss.
			e.due = time.Now().Add(max(e.interval/4, 10*time.Millisecond))
		}
		heap.Push(&r.entries, e)
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

type entryHeap []*entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h entryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}
