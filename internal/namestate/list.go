package namestate

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/redsem/redsem/limiter/inspect"
)

// The kinds of what List lists: a name may be both, in two entries.
const (
	KindSemaphore = "semaphore"
	KindRate      = "rate"
)

// Entry is a semaphore without its holders' details, or a rate limit.
// Every field is in every entry, so that scripts written before rate
// limits read a rate's entry as an unused semaphore.
type Entry struct {
	Name       string `json:"name"`
	Kind       string `json:"kind"`        // KindSemaphore or KindRate
	FleetLimit *int64 `json:"fleet_limit"` // null when none is set, and for a rate
	// The limits its processes apply, for a semaphore; the rates, for a
	// rate (State's). Empty when none is recorded.
	Limits  []LimitInUse `json:"limits"`
	Rates   []RateInUse  `json:"rates"`
	InUse   int64        `json:"in_use"`
	Holders int          `json:"holders"`
	Waiters int          `json:"waiters"` // requests in the wait queue
	// A rate's; null for a semaphore.
	FleetRate  *RateJSON `json:"fleet_rate"`
	NextFreeMs *int64    `json:"next_free_ms"`
	// PausedMs is the name's pause, which semaphore and rate share.
	PausedMs int64 `json:"paused_ms"`
	// Learned is the state of its learned limit or rate (State's,
	// Rate's); null when fixed.
	Learned *Learned `json:"learned"`
}

// Parallel bounds the names List and Each read at once.
const Parallel = 16

// List lists the semaphores and rate limits whose names match the glob
// pattern ("" = all; as Inspector.Names), sorted by name, a semaphore
// before the rate limit of the same name. Errors are the Inspector's;
// the first (in names' order) wins.
func List(ctx context.Context, in *inspect.Inspector, pattern string) ([]Entry, error) {
	sems, err := in.Names(ctx, pattern)
	if err != nil {
		return nil, err
	}
	rates, err := in.RateNames(ctx, pattern)
	if err != nil {
		return nil, err
	}
	semEntries, err := Each(ctx, sems, func(ctx context.Context, name string) (Entry, error) {
		return semEntry(ctx, in, name)
	})
	if err != nil {
		return nil, err
	}
	rateEntries, err := Each(ctx, rates, func(ctx context.Context, name string) (Entry, error) {
		return rateEntry(ctx, in, name)
	})
	if err != nil {
		return nil, err
	}
	entries := append(semEntries, rateEntries...)
	slices.SortStableFunc(entries, func(a, b Entry) int { return cmp.Compare(a.Name, b.Name) })
	return entries, nil
}

func semEntry(ctx context.Context, in *inspect.Inspector, name string) (Entry, error) {
	st, err := Read(ctx, in, name)
	e := Entry{Name: name, Kind: KindSemaphore, FleetLimit: st.FleetLimit, Limits: st.Limits, Rates: []RateInUse{},
		InUse: st.InUse, Holders: len(st.Holders), Waiters: len(st.Waiters), Learned: st.Learned}
	if st.Rate != nil {
		e.PausedMs = st.Rate.PausedMs
	}
	return e, err
}

func rateEntry(ctx context.Context, in *inspect.Inspector, name string) (Entry, error) {
	e := Entry{Name: name, Kind: KindRate, Limits: []LimitInUse{}, Rates: []RateInUse{}}
	u, err := in.InUse(ctx, name)
	if err != nil {
		return e, err
	}
	e.Rates = RatesOf(u)
	v, _, err := ReadRate(ctx, in, name)
	e.FleetRate, e.NextFreeMs, e.PausedMs, e.Learned = v.FleetRate, v.NextFreeMs, v.PausedMs, v.Learned
	return e, err
}

// Each reads every name with read, Parallel at once, and returns what it
// read in names' order; the first error (in names' order) wins, and then
// nothing is returned. It returns once every read has.
func Each[T any](ctx context.Context, names []string, read func(context.Context, string) (T, error)) ([]T, error) {
	out := make([]T, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	turn := make(chan struct{}, Parallel)
	for i, name := range names {
		wg.Add(1)
		turn <- struct{}{}
		go func() {
			defer func() { <-turn; wg.Done() }()
			out[i], errs[i] = read(ctx, name)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
