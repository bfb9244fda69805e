package limiter

import (
	"container/heap"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// refresher keeps alive everything one Client holds or waits for: leases
// (every RefreshInterval) and queue entries (every QueueTTL/3); and it
// records the limits the Client uses (uses.go) in the same rounds. Entries are
// kept in a heap by due time; those due together are sent together, one
// script call per semaphore, so a Client holding 10,000 leases of one name
// sends a handful of calls per round, not 10,000. Its goroutine runs
// while it has entries and exits at its next timer after the last one
// left: adding or removing an entry wakes it only when the entry is due
// before its timer, so a lease acquired and released costs it nothing.
type refresher struct {
	c *Client

	mu      sync.Mutex // guards what follows
	closed  bool       // the Client closed: nothing more is added
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

// entry is a lease or a waiter in the refresher. Its fields are the
// refresher's, guarded by its mu.
type entry struct {
	lease    *Lease
	waiter   *waiter
	uses     *uses // the Client's record of its limits in use
	due      time.Time
	interval time.Duration
	index    int // in the heap; -1 while being refreshed or after removal
	removed  bool
}

func (e *entry) keys() store.Keyspace {
	if e.lease != nil {
		return e.lease.sem.keys
	}
	return e.waiter.sem.keys
}

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
	w.sem.c.uses.mark(useKey{name: w.sem.name, limit: w.sem.limit})
	r.add(w, &entry{waiter: w, due: time.Now().Add(store.QueueTTL / 3), interval: store.QueueTTL / 3}, func() bool { return true })
}

// refreshSlack is the interval of the record of the limits in use: the
// refresher takes it up to half of that early, so that it rides along
// with a round of lease refreshes (every second or more often, at the
// default TTL) rather than have one of its own, and a Client's first
// record waits freshDelay less that half.
const refreshSlack = time.Second

// addUses has the Client's limits in use recorded by due (or earlier, if
// already due sooner).
func (r *refresher) addUses(u *uses, due time.Time) {
	r.mu.Lock()
	if e := r.byOwner[u]; e != nil {
		// Being recorded (index -1): its next due time counts the new.
		if e.index >= 0 && due.Before(e.due) {
			e.due = due
			heap.Fix(&r.entries, e.index)
			if due.Before(r.wakeAt) {
				r.wake()
			}
		}
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.add(u, &entry{uses: u, due: due, interval: refreshSlack}, func() bool { return true })
}

func (r *refresher) add(owner any, e *entry, live func() bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Checked under the lock remove takes, so an end racing with this
	// add either comes first (nothing added) or removes what was added.
	if r.closed || !live() || r.byOwner[owner] != nil {
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
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removeLocked(owner)
}

func (r *refresher) removeLocked(owner any) {
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

// close stops the refresher taking entries; the Client's Close calls it
// before it waits for its goroutines, so none is started after.
func (r *refresher) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
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
			r.mu.Lock()
			r.running = false
			r.mu.Unlock()
			return
		}
	}
}

// due takes out the entries to refresh now: those due within half their
// interval, so entries that fall due close together go together (and,
// after one round, stay together). Early is harmless: a refresh only
// extends. Leases kept alive for MaxHold are let go: they end at their
// local deadline as lost. ok is false when there is nothing left to keep
// alive.
func (r *refresher) due(now time.Time) (batch []*entry, next time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
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
		if e.lease != nil && e.lease.pastMaxHold(now) {
			r.removeLocked(e.lease)
			continue
		}
		batch = append(batch, e)
	}
	// Entries being refreshed come back with a later due time.
	r.wakeAt = now.Add(time.Hour)
	return batch, r.wakeAt, true
}

// refresh sends one batch per semaphore, applies the answers, and puts
// the entries back with their next due time.
func (r *refresher) refresh(entries []*entry) {
	sent := time.Now()
	var rec *entry
	if i := slices.IndexFunc(entries, func(e *entry) bool { return e.uses != nil }); i >= 0 {
		rec = entries[i]
		entries = slices.Delete(slices.Clone(entries), i, i+1)
	}
	retry := r.refreshLeases(sent, entries)
	if rec != nil {
		// After the leases: a record's call never delays theirs.
		rec.uses.record(sent)
		entries = append(entries, rec)
	}
	r.requeue(sent, entries, retry)
}

// refreshLeases sends the leases' and waiters' batches, applies the
// answers, and returns the entries whose refresh failed.
func (r *refresher) refreshLeases(sent time.Time, entries []*entry) map[*entry]bool {
	retry := map[*entry]bool{}
	if len(entries) == 0 {
		return retry
	}
	batches, deadline := batchesOf(r.c.uses, entries, sent)
	reqs := make([]store.RefreshBatch, len(batches))
	for i, b := range batches {
		reqs[i] = b.req
	}
	ctx, cancel := context.WithDeadline(r.c.ctx, deadline)
	results, err := bounded(r.c, ctx, func() ([]store.RefreshResult, error) { return r.c.st.Refresh(ctx, reqs), nil })
	cancel()
	for i, b := range batches {
		res := store.RefreshResult{Err: err}
		if err == nil {
			res = results[i]
		}
		b.apply(sent, res, retry)
	}
	return retry
}

// requeue puts the entries back with their next due time; the record of
// the limits in use leaves when nothing is in use.
func (r *refresher) requeue(sent time.Time, entries []*entry, retry map[*entry]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range entries {
		if e.removed {
			continue
		}
		e.due = sent.Add(e.interval)
		if e.uses != nil {
			var keep bool
			if e.due, keep = e.uses.next(time.Now()); !keep {
				r.removeLocked(e.uses)
				continue
			}
		}
		if retry[e] {
			// Soon: the local deadline, not this failure, decides loss.
			e.due = time.Now().Add(max(e.interval/4, 10*time.Millisecond))
		}
		heap.Push(&r.entries, e)
	}
}

// batch is the refresh of one semaphore, with the entries of its items in
// their order.
type batch struct {
	req     store.RefreshBatch
	leases  []*entry
	waiters []*entry
}

// batchesOf groups entries by semaphore. deadline bounds the call: a
// reply after every lease's local deadline is useless, and a hung server
// must not stall the refresher longer.
func batchesOf(u *uses, entries []*entry, sent time.Time) (out []*batch, deadline time.Time) {
	deadline = sent.Add(store.QueueTTL / 3)
	index := map[string]*batch{}
	for _, e := range entries {
		k := e.keys()
		b := index[k.ID()]
		if b == nil {
			b = &batch{req: store.RefreshBatch{Keys: k}}
			index[k.ID()] = b
			out = append(out, b)
		}
		if l := e.lease; l != nil {
			u.mark(useKey{name: l.sem.name, limit: l.sem.limit})
			b.req.Leases = append(b.req.Leases, l.refreshItem())
			b.req.Replicas = b.req.Replicas.Stricter(l.sem.cfg.replicas)
			b.leases = append(b.leases, e)
			deadline = maxTime(deadline, l.localDeadline())
		} else {
			u.mark(useKey{name: e.waiter.sem.name, limit: e.waiter.sem.limit})
			b.req.Waits = append(b.req.Waits, e.waiter.id)
			b.waiters = append(b.waiters, e)
		}
	}
	return out, deadline
}

// apply hands each entry its answer, and marks in retry those whose
// refresh failed.
func (b *batch) apply(sent time.Time, res store.RefreshResult, retry map[*entry]bool) {
	for j, e := range b.leases {
		if e.lease.applyRefresh(sent, res, j) != nil {
			retry[e] = true
		}
	}
	for j, e := range b.waiters {
		var headIn time.Duration
		isHead := false
		if j < len(res.Waits) {
			headIn, isHead = store.WaiterHead(res.Waits[j])
		}
		switch {
		case res.Err != nil:
			retry[e] = true
		case isHead:
			// At the head: the timer for the expiry ahead is its own, as
			// a waiter made the head without a word learns here.
			e.waiter.queued(sent, "")
			e.waiter.madeHead(headIn - time.Since(sent))
		case j < len(res.Waits) && res.Waits[j] != store.WaiterQueued:
			if res.Waits[j] == store.WaiterFits {
				e.waiter.queued(sent, "")
			}
			e.waiter.signal() // gone: it queues again; fits: it tries now
		case j < len(res.Waits):
			e.waiter.queued(sent, "")
		}
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
