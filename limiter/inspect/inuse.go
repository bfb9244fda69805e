package inspect

import (
	"cmp"
	"context"
	"slices"

	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/internal/bridge"
	"github.com/redsem/redsem/limiter/internal/store"
)

// InUse is what a name runs at: the fleet-wide limit and rate stored with
// SetLimit and SetRate, which every process obeys when set, and else the
// limits and rates its processes' Clients apply. Where they disagree,
// Limits and Rates hold each value with how many Clients apply it.
type InUse struct {
	FleetLimit int64        // stored with SetLimit, or learned (0: none)
	FleetRate  limiter.Rate // stored with SetRate (zero: none)
	// Learned is set when the limit is learned (Adaptive): FleetLimit is
	// then the limit it has learned. A rate's is in RateState.
	Learned *Learned
	// Limits are the limits of the name's Semaphores that Clients used
	// (acquired, waited on, or held) within the last ~30s; Rates, the
	// rates of its RateLimits that they reserved events by. Most Clients
	// first, then the higher limit or faster rate; empty when none was
	// used.
	Limits []LimitInUse
	Rates  []RateInUse
}

// LimitInUse is one Semaphore limit that Processes Clients apply to a
// name (one Client per process, as the package advises).
type LimitInUse struct {
	Limit     int64
	Processes int
}

// RateInUse is one rate that Processes Clients apply to a name.
type RateInUse struct {
	Rate      limiter.Rate
	Processes int
}

// InUse reads what name runs at, in one call. Each Client records the
// limits and rates it applies with its keep-alive (every 10s while it
// uses them, and within about a second of a value's first use): no call is added
// to an acquire or a reservation. A record lasts 30s unless written
// again, so a process that died, or stopped using the name, drops out
// within 30s; one that closed its Client too. A Redlock Client records
// none: its InUse returns InUse{} and no error. Errors are the other methods': an *ArgumentError, a Redis
// failure or ctx's end wrapped, ErrClosed.
func (i *Inspector) InUse(ctx context.Context, name string) (InUse, error) {
	if _, err := i.keys(ctx, name); err != nil {
		return InUse{}, err
	}
	st, ok := i.c.Store.(store.Uses)
	if !ok {
		return InUse{}, nil
	}
	s, err := st.ReadUses(ctx, store.NewUseKeyspace(i.c.Prefix, name))
	if err != nil {
		return InUse{}, bridge.RedisError("read limits in use", name, err)
	}
	return inUseOf(s), nil
}

func inUseOf(s store.UseState) InUse {
	u := InUse{FleetLimit: s.FleetLimit, FleetRate: limiter.Rate(s.FleetRate), Learned: learned(s.Learned, s.Now, true)}
	for v, n := range s.Owners {
		switch limit, r, isRate, ok := store.ParseUseValue(v); {
		case !ok: // a later version's: not ours to show
		case isRate:
			u.Rates = append(u.Rates, RateInUse{Rate: limiter.Rate(r), Processes: n})
		default:
			u.Limits = append(u.Limits, LimitInUse{Limit: limit, Processes: n})
		}
	}
	slices.SortFunc(u.Limits, func(a, b LimitInUse) int {
		return cmp.Or(cmp.Compare(b.Processes, a.Processes), cmp.Compare(b.Limit, a.Limit))
	})
	slices.SortFunc(u.Rates, func(a, b RateInUse) int {
		return cmp.Or(cmp.Compare(b.Processes, a.Processes),
			cmp.Compare(store.Rate(a.Rate).Interval(), store.Rate(b.Rate).Interval()), cmp.Compare(b.Rate.Burst, a.Rate.Burst))
	})
	return u
}
