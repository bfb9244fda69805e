// Package namestate reads a name's state from Redis as one consistent
// picture: a semaphore's fleet limit, holders and wait queue, and the
// rate limit of the same name. The redsem command (ls, show, watch) and
// the dashboard both show what it reads, in JSON with these field names.
package namestate

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/redsem/redsem/limiter/inspect"
)

// State is one name as Redis sees it, a semaphore and the rate limit of
// the same name.
type State struct {
	Name string `json:"name"`
	// FleetLimit is the limit stored with Inspector.SetLimit; nil (null)
	// when none is set: each process then uses its constructor's limit,
	// which Redis does not know.
	FleetLimit *int64 `json:"fleet_limit"`
	// Limits are the limits the processes' Semaphores of the name apply
	// (each with how many processes apply it), Rates their RateLimits'
	// rates, as their Clients recorded them lately (limiter's
	// Inspector.InUse); empty when none did. A fleet limit or rate, when
	// set, overrides them.
	Limits []LimitInUse `json:"limits"`
	Rates  []RateInUse  `json:"rates"`
	// Learned is the state of a learned limit (limiter.Adaptive): then
	// FleetLimit is what it learned; nil (null) otherwise.
	Learned *Learned `json:"learned"`
	// Rate is the state of the rate limit of the same name; nil (null)
	// when it has none: no fleet rate, no reservations and no pause.
	Rate    *Rate    `json:"rate"`
	InUse   int64    `json:"in_use"` // permits: the holders' weights summed
	Holders []Holder `json:"holders"`
	Waiters []Waiter `json:"waiters"` // in the order they will be served
}

// Holder is a live lease.
type Holder struct {
	ID     string `json:"id"`
	Weight int64  `json:"weight"`
	Token  int64  `json:"token"`
	TTLms  int64  `json:"ttl_ms"` // until it expires unless refreshed
}

// Waiter is a request in the wait queue.
type Waiter struct {
	ID     string `json:"id"` // the wait id, which is not always the lease id it will get
	Weight int64  `json:"weight"`
	TTLms  int64  `json:"ttl_ms"` // until its entry expires unless its Client keeps it alive
	Limit  int64  `json:"limit"`  // its Semaphore's own limit, which it is served under when no fleet limit is set
	Why    Why    `json:"why"`    // why it waits and when it should be granted
}

// Why is why a request waits (inspect.Why).
type Why struct {
	Reason       string `json:"reason"` // limiter.Reason: "" (about to be granted), full, fleet-limit, paused, quarantine, rate
	Ahead        int    `json:"ahead"`  // waiters ahead of it
	AheadPermits int64  `json:"ahead_permits"`
	// ETAms is how long until it should be granted (null: never, heavier
	// than the fleet limit); Estimated: from the holders' ages, not a
	// known end.
	ETAms     *int64 `json:"eta_ms"`
	Estimated bool   `json:"estimated"`
}

// WhyOf is w in JSON's terms.
func WhyOf(w inspect.Why) Why {
	out := Why{Reason: string(w.Reason), Ahead: w.Ahead, AheadPermits: w.AheadPermits, Estimated: w.Estimated}
	if w.ETA >= 0 {
		ms := w.ETA.Milliseconds()
		out.ETAms = &ms
	}
	return out
}

// readTries bounds how often Read reads the holders again because the
// queue changed meanwhile.
const readTries = 3

// Read reads a semaphore's fleet limit and the limits and rates in use,
// its holders, oldest grant (lowest
// fencing token) first, its wait queue in serving order, and the rate
// state of its name. Errors are the Inspector's: an *ArgumentError for a
// nil ctx or an empty name, a Redis failure or ctx's end wrapped; the
// state read so far comes with them.
//
// The limiter reads holders and queue in separate calls: a waiter granted
// between them would show in both lists, or in neither. So the queue is
// read before and after the holders, and the holders again while the
// queue changed meanwhile (at most readTries times; then the last reads
// are kept). A grant takes the waiter off the queue in the same script,
// so when the queue is the same on both sides of the holders no waiter
// listed was granted while they were read. The rate state is read last,
// apart: it is another key, which no grant changes.
func Read(ctx context.Context, in *inspect.Inspector, name string) (State, error) {
	st, err := ReadWith(ctx, in, name)
	if err != nil {
		return st, err
	}
	rv, has, err := ReadRate(ctx, in, name)
	if has {
		st.Rate = &rv
	}
	return st, err
}

// Reader is what Read reads of a *inspect.Inspector.
type Reader interface {
	InUse(ctx context.Context, name string) (inspect.InUse, error)
	Waiters(ctx context.Context, name string) ([]inspect.Waiter, error)
	Holders(ctx context.Context, name string) ([]inspect.Holder, error)
}

// ReadWith is Read without the rate state, from any Reader.
func ReadWith(ctx context.Context, r Reader, name string) (State, error) {
	st := State{Name: name, Holders: []Holder{}, Waiters: []Waiter{}, Limits: []LimitInUse{}, Rates: []RateInUse{}}
	u, err := r.InUse(ctx, name)
	if err != nil {
		return st, err
	}
	if u.FleetLimit > 0 {
		st.FleetLimit = &u.FleetLimit
	}
	st.Limits, st.Rates, st.Learned = LimitsOf(u), RatesOf(u), LearnedOf(u.Learned)
	ws, err := r.Waiters(ctx, name)
	if err != nil {
		return st, err
	}
	var hs []inspect.Holder
	for range readTries {
		if hs, err = r.Holders(ctx, name); err != nil {
			return st, err
		}
		after, err := r.Waiters(ctx, name)
		if err != nil {
			return st, err
		}
		same := slices.EqualFunc(ws, after, func(a, b inspect.Waiter) bool { return a.ID == b.ID })
		ws = after
		if same {
			break
		}
	}
	for _, w := range ws {
		st.Waiters = append(st.Waiters, Waiter{ID: w.ID, Weight: w.Weight, TTLms: w.TTL.Milliseconds(), Limit: w.Limit, Why: WhyOf(w.Why)})
	}
	st.Holders, st.InUse = HoldersOf(hs)
	return st, nil
}

// FleetLimit reads name's fleet limit: nil when none is set (each process
// then uses its own, which Redis does not know). Errors are r's.
func FleetLimit(ctx context.Context, r interface {
	Limit(ctx context.Context, name string) (int64, error)
}, name string) (*int64, error) {
	n, err := r.Limit(ctx, name)
	if err != nil || n == 0 {
		return nil, err
	}
	return &n, nil
}

// HoldersOf lists hs oldest grant (lowest fencing token) first, and the
// permits they hold.
func HoldersOf(hs []inspect.Holder) (infos []Holder, inUse int64) {
	infos = make([]Holder, 0, len(hs))
	for _, h := range hs {
		inUse += h.Weight
		infos = append(infos, HolderOf(h))
	}
	slices.SortFunc(infos, func(a, b Holder) int { return cmp.Compare(a.Token, b.Token) })
	return infos, inUse
}

// HolderOf is h as State lists it.
func HolderOf(h inspect.Holder) Holder {
	return Holder{ID: h.ID, Weight: h.Weight, Token: h.Token, TTLms: h.TTL.Milliseconds()}
}

// CeilMs is d in whole milliseconds, rounded up: 300µs left is not "now".
func CeilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
