package limiter

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// The limits in use: each Client records in Redis, per name, the limit of
// the Semaphores and the rate of the RateLimits it used lately, so that
// operators see what a name runs at when that lives only in code
// (inspect.Inspector.InUse). The refresher writes them, all of them every
// usePeriod while any is used, and a value new to the Client within
// freshDelay: never a call per acquire. A record lasts useTTL unless
// written again, so a dead process's go with it.
//
// freshDelay lets new values arriving together go together, and the
// first record of a Client go with a round of its keep-alive rather than
// on its own (a record in flight to a hung server holds Close up to
// go-redis's ReadTimeout, as a refresh does).
const freshDelay = time.Second

// usePeriodNs is the period, 10s; a record lasts 3 of them (useTTL). A
// variable for the tests (export_test.go), atomic as Clients read it
// from their goroutines.
var usePeriodNs atomic.Int64

func init() { usePeriodNs.Store(int64(10 * time.Second)) }

func usePeriod() time.Duration { return time.Duration(usePeriodNs.Load()) }
func useTTL() time.Duration    { return 3 * usePeriod() }

// useKey is one value a Client applies to a name: a Semaphore's limit
// (rate zero) or a RateLimit's rate (limit 0).
type useKey struct {
	name  string
	limit int64
	rate  Rate
}

// uses is a Client's register of the values it applies. marked holds,
// per value, whether it was used since the last full record: mark's
// common path is a read lock, a map read and a load, with no allocation.
type uses struct {
	c *Client

	mu       sync.RWMutex // guards what follows; the flags' pointers, not their values
	marked   map[useKey]*atomic.Bool
	fresh    []useKey  // new values not recorded yet
	lastFull time.Time // the last record of every value
}

func newUses(c *Client) *uses { return &uses{c: c, marked: map[useKey]*atomic.Bool{}} }

// mark notes that k is used now. A value new to the Client (or unused
// for a period) has the refresher record it within freshDelay.
func (u *uses) mark(k useKey) {
	u.mu.RLock()
	f := u.marked[k]
	u.mu.RUnlock()
	if f != nil && f.Load() {
		return
	}
	u.mu.Lock()
	f = u.marked[k]
	isNew := f == nil
	if isNew {
		f = new(atomic.Bool)
		u.marked[k] = f
		u.fresh = append(u.fresh, k)
	}
	f.Store(true)
	u.mu.Unlock()
	if isNew {
		u.c.refresher.addUses(u, time.Now().Add(freshDelay))
	}
}

// take returns the values to record now: when a full record is due,
// every value used since the last (forgetting the others, which then
// expire in Redis), else the fresh ones.
func (u *uses) take(now time.Time) []useKey {
	u.mu.Lock()
	defer u.mu.Unlock()
	if now.Sub(u.lastFull) < usePeriod()-refreshSlack {
		out := u.fresh
		u.fresh = nil
		return out
	}
	u.lastFull, u.fresh = now, nil
	var out []useKey
	for k, f := range u.marked {
		if f.Swap(false) {
			out = append(out, k)
		} else {
			delete(u.marked, k)
		}
	}
	return out
}

// next says when to record again, and whether anything is left to
// record (keep false: the refresher drops its entry until the next mark).
func (u *uses) next(now time.Time) (due time.Time, keep bool) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	due = u.lastFull.Add(usePeriod())
	if len(u.fresh) > 0 {
		due = minTime(due, now.Add(freshDelay))
	}
	return due, len(u.marked) > 0
}

// record writes the values due, bounded by timeout. A failure is left to
// the next record: a record outlives two of them (useTTL).
func (u *uses) record(now time.Time) {
	st, ok := u.c.st.(store.Uses)
	keys := u.take(now)
	if !ok || len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(u.c.ctx, store.QueueTTL/3)
	defer cancel()
	recs := recordsOf(u.c.cfg.prefix, keys)
	_, _ = bounded(u.c, ctx, func() (struct{}, error) {
		return struct{}{}, st.RecordUses(ctx, u.c.id, useTTL(), recs)
	})
}

// recordsOf groups keys by name, one record each.
func recordsOf(prefix string, keys []useKey) []store.UseRecord {
	byName := map[string][]string{}
	for _, k := range keys {
		v := store.LimitValue(k.limit)
		if k.limit == 0 {
			v = store.RateValue(store.Rate(k.rate))
		}
		byName[k.name] = append(byName[k.name], v)
	}
	recs := make([]store.UseRecord, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		recs = append(recs, store.UseRecord{Key: store.NewUseKeyspace(prefix, name).Keys[2], Values: byName[name]})
	}
	return recs
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
