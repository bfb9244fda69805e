package main

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/redsem/redsem/limiter"
)

// semState is one name as Redis sees it, a semaphore and the rate limit
// of the same name; ls, show and watch print it, in JSON with these field
// names.
type semState struct {
	Name string `json:"name"`
	// FleetLimit is the limit stored by the limit command; nil (null,
	// "-") when none is set: each process then uses its constructor's
	// limit, which Redis does not know.
	FleetLimit *int64 `json:"fleet_limit"`
	// Rate is the state of the rate limit of the same name; nil (null)
	// when it has none: no fleet rate, no reservations and no pause.
	Rate    *rateView    `json:"rate"`
	InUse   int64        `json:"in_use"` // permits: the holders' weights summed
	Holders []holderInfo `json:"holders"`
	Waiters []waiterInfo `json:"waiters"` // in the order they will be served
}

type holderInfo struct {
	ID     string `json:"id"`
	Weight int64  `json:"weight"`
	Token  int64  `json:"token"`
	TTLms  int64  `json:"ttl_ms"` // until it expires unless refreshed
}

// waiterInfo is a request in the wait queue.
type waiterInfo struct {
	ID     string `json:"id"` // the wait id, which is not always the lease id it will get
	Weight int64  `json:"weight"`
	TTLms  int64  `json:"ttl_ms"` // until its entry expires unless its Client keeps it alive
}

// inspectTries bounds how often inspect reads the holders again because
// the queue changed meanwhile.
const inspectTries = 3

// inspect reads a semaphore's fleet limit, its holders, oldest grant
// (lowest fencing token) first, and its wait queue in serving order.
//
// The limiter reads holders and queue in separate calls: a waiter granted
// between them would show in both lists, or in neither. So the queue is
// read before and after the holders, and the holders again while the
// queue changed meanwhile (at most inspectTries times; then the last
// reads are kept). A grant takes the waiter off the queue in the same
// script, so when the queue is the same on both sides of the holders no
// waiter listed was granted while they were read.
// The rate state is read last, apart: it is another key, which no grant
// changes.
func inspect(ctx context.Context, c *limiter.Client, name string) (semState, error) {
	in := c.Inspector()
	st, err := inspectWith(ctx, in, name)
	if err != nil {
		return st, err
	}
	rv, has, err := readRate(ctx, in, name)
	if has {
		st.Rate = &rv
	}
	return st, err
}

// reader is what inspect reads of a *limiter.Inspector.
type reader interface {
	Limit(ctx context.Context, name string) (int64, error)
	Waiters(ctx context.Context, name string) ([]limiter.Waiter, error)
	Holders(ctx context.Context, name string) ([]limiter.Holder, error)
}

func inspectWith(ctx context.Context, r reader, name string) (semState, error) {
	st := semState{Name: name, Holders: []holderInfo{}, Waiters: []waiterInfo{}}
	var err error
	if st.FleetLimit, err = fleetLimitOf(ctx, r, name); err != nil {
		return st, err
	}
	ws, err := r.Waiters(ctx, name)
	if err != nil {
		return st, err
	}
	var hs []limiter.Holder
	for range inspectTries {
		if hs, err = r.Holders(ctx, name); err != nil {
			return st, err
		}
		after, err := r.Waiters(ctx, name)
		if err != nil {
			return st, err
		}
		same := slices.EqualFunc(ws, after, func(a, b limiter.Waiter) bool { return a.ID == b.ID })
		ws = after
		if same {
			break
		}
	}
	for _, w := range ws {
		st.Waiters = append(st.Waiters, waiterInfo{ID: w.ID, Weight: w.Weight, TTLms: w.TTL.Milliseconds()})
	}
	st.Holders, st.InUse = holdersOf(hs)
	return st, nil
}

// fleetLimitOf reads name's fleet limit: nil when none is set (each
// process then uses its own, which Redis does not know).
func fleetLimitOf(ctx context.Context, r interface {
	Limit(ctx context.Context, name string) (int64, error)
}, name string) (*int64, error) {
	n, err := r.Limit(ctx, name)
	if err != nil || n == 0 {
		return nil, err
	}
	return &n, nil
}

// holdersOf lists hs oldest grant (lowest fencing token) first, and the
// permits they hold.
func holdersOf(hs []limiter.Holder) (infos []holderInfo, inUse int64) {
	infos = make([]holderInfo, 0, len(hs))
	for _, h := range hs {
		inUse += h.Weight
		infos = append(infos, holderOf(h))
	}
	slices.SortFunc(infos, func(a, b holderInfo) int { return cmp.Compare(a.Token, b.Token) })
	return infos, inUse
}

func holderOf(h limiter.Holder) holderInfo {
	return holderInfo{ID: h.ID, Weight: h.Weight, Token: h.Token, TTLms: h.TTL.Milliseconds()}
}

// noFleetLimit is what show and limit say when no fleet limit is set.
const noFleetLimit = "- (no fleet limit: each process uses its own)"

// limitText is a fleet limit for a table: "-" when none is set.
func limitText(l *int64) string {
	if l == nil {
		return "-"
	}
	return strconv.FormatInt(*l, 10)
}

func ttlText(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).String()
}

func writeJSON(w io.Writer, v any) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(v)
}
