package inspect

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/internal/bridge"
	"github.com/redsem/redsem/limiter/internal/store"
)

// Why is why a request waits and when it should be granted.
type Why struct {
	Reason limiter.Reason
	// Ahead is how many live waiters are ahead of it in the queue, and
	// AheadPermits the permits they ask for.
	Ahead        int
	AheadPermits int64
	// InUse is the sum of the holders' weights, and Limit the limit it is
	// served under (the fleet limit, else its Semaphore's own; 0 when not
	// known).
	InUse, Limit int64
	// ETA is how long, from the read, until it should be granted; -1 when
	// never (heavier than the fleet limit). Estimated: it depends on when
	// holders release, guessed from their ages (they are taken to hold as
	// long as the recent grants' spacing says, see docs/design.md);
	// otherwise it is the known end of a pause, the quarantine or the
	// rate's next slot.
	ETA       time.Duration
	Estimated bool
}

// Why says why the request id (a wait id as Waiters lists it) waits on
// name and when it should be granted; with id "", why a request of weight
// 1 made now would wait (behind every waiter, under the limit of the
// name's last grant, and, when the name is also a RateLimit's, for its
// next slot), limiter.ReasonNone when it would not. One script call reads the
// holders, the whole queue up to id, the pause and the quarantine at one
// instant (about 40ms for 10,000 waiters ahead), plus one for the rate
// when id is "". Each waiter is judged by its own Client's
// RestartQuarantine, which its queue entry keeps (one queued by a version
// before this one's, and a new request, by this Client's). It only reads:
// a ctx that ends, or a Redis failure,
// returns that error wrapped and leaves nothing behind. An id not in the
// queue (granted, gone) gives an *ArgumentError naming "id"; a Redlock
// Client, whose nodes each hold their own queue, an error; after Close,
// ErrClosed.
func (i *Inspector) Why(ctx context.Context, name, id string) (Why, error) {
	k, err := i.keys(ctx, name)
	if err != nil {
		return Why{}, err
	}
	st, err := i.whyState(ctx, k, name, allWaiters, id)
	if err != nil {
		return Why{}, err
	}
	if id == "" {
		return i.whyNew(ctx, name, st)
	}
	ws := explain(st)
	if len(st.Waiters) == 0 || st.Waiters[len(st.Waiters)-1].ID != id {
		return Why{}, bridge.ArgError("id", id, fmt.Sprintf("not waiting for %q", name))
	}
	return ws[len(ws)-1], nil
}

// allWaiters: Why for a new request reads the whole queue.
const allWaiters = 1 << 30

// whyState reads name's state for Why, at most max waiters (or up to wait).
func (i *Inspector) whyState(ctx context.Context, k store.Keyspace, name string, max int, wait string) (store.WhyState, error) {
	ws, ok := i.c.Store.(store.Whys)
	if !ok {
		return store.WhyState{}, fmt.Errorf("limiter: why %q: a Redlock Client's nodes each hold their own queue", name)
	}
	st, err := ws.WhyState(ctx, k, max, wait, i.c.Quarantine)
	if err != nil {
		return store.WhyState{}, bridge.RedisError("why", name, err)
	}
	return st, nil
}

// whyNew is Why for a request of weight 1 made now: the queue's answer
// for one more waiter, or the rate's next slot when that is later.
func (i *Inspector) whyNew(ctx context.Context, name string, st store.WhyState) (Why, error) {
	limit := st.Limit
	if limit == 0 && st.FleetLimit == 0 {
		limit = store.MaxLimit // no grant yet: nothing but a gate holds it back
	}
	st.Waiters = append(st.Waiters, store.Waiter{Weight: 1, Limit: limit, Quarantine: st.Quarantine})
	w := explain(st)
	why := w[len(w)-1]
	if limit == store.MaxLimit {
		why.Limit = 0 // not known
	}
	next, err := i.nextSlot(ctx, name)
	if err != nil {
		return Why{}, err
	}
	if next > 0 && why.ETA >= 0 && next >= why.ETA {
		why.Reason, why.ETA, why.Estimated = limiter.ReasonRate, next, false
		if st.PauseEnd > st.Now && next <= time.Duration(st.PauseEnd-st.Now)*time.Microsecond+time.Millisecond {
			why.Reason = limiter.ReasonPaused
		}
	}
	return why, nil
}

// nextSlot is how long until name's rate gives an event of cost 1 a time:
// by the fleet rate, else by the one rate its processes apply (the pause
// alone when they disagree); 0 when the name has no rate state or its
// slot is now.
func (i *Inspector) nextSlot(ctx context.Context, name string) (time.Duration, error) {
	k, rates, err := i.rateKeys(ctx, name)
	if errors.Is(err, limiter.ErrRatesUnsupported) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	st, err := rates.RateState(ctx, k)
	switch {
	case err != nil:
		return 0, bridge.RedisError("read rate", name, err)
	case !st.Known || st.NextFree >= 0:
		return max(st.NextFree, 0), nil
	}
	u, err := i.InUse(ctx, name)
	if err != nil || len(u.Rates) != 1 {
		return st.Paused, err
	}
	own := store.Rate(u.Rates[0].Rate)
	return max(st.Tat-time.Duration(own.Burst-1)*own.Interval(), 0, st.Paused), nil
}

// whyWaiters is Waiters with each waiter's Why, in one call.
func (i *Inspector) whyWaiters(ctx context.Context, k store.Keyspace, name string) ([]Waiter, error) {
	st, err := i.whyState(ctx, k, name, maxWaitersListed, "")
	if err != nil {
		return nil, err
	}
	whys := explain(st)
	out := make([]Waiter, len(st.Waiters))
	for j, w := range st.Waiters {
		out[j] = Waiter{ID: w.ID, Weight: w.Weight, TTL: w.TTL, Limit: w.Limit, Why: whys[j]}
	}
	return out, nil
}

// explain says why each waiter of st waits, in queue order. It replays
// the queue as release.lua serves it (strict FIFO, each waiter under the
// fleet limit or else its own, none before the pause's end or its own
// quarantine's), against releases predicted from the holders' ages: the
// holders are taken to hold for as long as a steady queue implies
// (holdEstimate), the waiters granted to hold as long too.
func explain(st store.WhyState) []Why {
	pause := max(time.Duration(st.PauseEnd-st.Now)*time.Microsecond, 0)
	hold := holdEstimate(st)
	var rel releases
	var inUse int64
	for _, h := range st.Holders {
		inUse += h.Weight
		left := max(hold-age(st, h), hold/time.Duration(2*len(st.Holders)))
		rel = append(rel, release{at: left, w: h.Weight})
	}
	heap.Init(&rel)
	out := make([]Why, len(st.Waiters))
	t, used := pause, inUse
	var ahead int64
	for j, w := range st.Waiters {
		limit := w.Limit
		if st.FleetLimit > 0 {
			limit = st.FleetLimit
		}
		gate := max(pause, w.Quarantine)
		t = max(t, gate)
		out[j] = Why{Ahead: j, AheadPermits: ahead, InUse: inUse, Limit: limit}
		out[j].Reason = reason(st, w, gate, inUse+ahead, limit)
		if w.Weight > limit || limit <= 0 {
			out[j].ETA = -1
			continue
		}
		ahead += w.Weight
		for rel.Len() > 0 && (used+w.Weight > limit || rel[0].at <= t) {
			r := heap.Pop(&rel).(release)
			t, used = max(t, r.at), used-r.w
		}
		out[j].ETA, out[j].Estimated = t, t > gate
		used += w.Weight
		heap.Push(&rel, release{at: t + hold, w: w.Weight})
	}
	return out
}

// reason is why w waits, with taken permits held or asked for ahead of it
// and gate until the pause or its quarantine ends.
func reason(st store.WhyState, w store.Waiter, gate time.Duration, taken, limit int64) limiter.Reason {
	switch {
	case w.Quarantine > 0:
		return limiter.ReasonQuarantine
	case st.FleetLimit > 0 && w.Weight > st.FleetLimit:
		return limiter.ReasonFleetLimit
	case gate > 0:
		return limiter.ReasonPaused
	case taken+w.Weight <= limit:
		return limiter.ReasonNone
	case store.HeldByFleet(st.FleetLimit, w.Limit, taken, w.Weight):
		return limiter.ReasonFleetLimit
	}
	return limiter.ReasonFull
}

// age is how long ago h was granted, by its fencing token (never below the
// server's clock in µs at its grant or handover).
func age(st store.WhyState, h store.WhyHolder) time.Duration {
	return time.Duration(min(max(st.Now-h.Token, 0), int64(24*time.Hour/time.Microsecond))) * time.Microsecond
}

// holdEstimate is how long a lease of st is held. Redis keeps no record
// of past releases (a counter would cost the release script a write), so
// it is read off the holders' ages: in a queue served steadily, n holders
// were granted one spacing d apart and each holds n·d, so the oldest
// frees d after it turns (n-1)·d old. One holder, or holders granted
// together, give no spacing: twice the oldest age then (the oldest
// holder is on average half-way through its hold).
func holdEstimate(st store.WhyState) time.Duration {
	n := len(st.Holders)
	if n == 0 {
		return time.Second
	}
	ages := make([]time.Duration, n)
	for j, h := range st.Holders {
		ages[j] = age(st, h)
	}
	oldest, newest := slices.Max(ages), slices.Min(ages)
	d := (oldest - newest) / time.Duration(max(n-1, 1))
	if n == 1 || d < oldest/time.Duration(4*n) {
		return max(2*oldest, time.Millisecond)
	}
	return max(time.Duration(n)*d, oldest)
}

// release is a predicted release: at, from the read; w permits.
type release struct {
	at time.Duration
	w  int64
}

// releases is a min-heap of predicted releases, soonest first.
type releases []release

func (r releases) Len() int           { return len(r) }
func (r releases) Less(a, b int) bool { return r[a].at < r[b].at }
func (r releases) Swap(a, b int)      { r[a], r[b] = r[b], r[a] }
func (r *releases) Push(x any)        { *r = append(*r, x.(release)) }
func (r *releases) Pop() any {
	old := *r
	x := old[len(old)-1]
	*r = old[:len(old)-1]
	return x
}
