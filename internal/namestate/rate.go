package namestate

import (
	"context"

	"github.com/redsem/redsem/limiter"
)

// RateJSON is a rate in JSON: Per as time.ParseDuration reads it, so that
// "EVENTS/PER burst BURST" is a rate limiter.ParseRate takes back.
type RateJSON struct {
	Events int64  `json:"events"`
	Per    string `json:"per"`
	Burst  int64  `json:"burst"`
}

// Rate is what Redis holds for a rate limit's name.
type Rate struct {
	// FleetRate is the rate stored with Inspector.SetRate; nil (null)
	// when none is: each process then uses its own, which Redis does not
	// know.
	FleetRate *RateJSON `json:"fleet_rate"`
	// NextFreeMs is how long until an event of cost 1 may go by the fleet
	// rate and the pause (0: now); nil (null) when Redis holds
	// reservations but no fleet rate, so that it depends on each process's
	// own rate.
	NextFreeMs *int64 `json:"next_free_ms"`
	// PausedMs is how long the name stays paused (0: not paused), rounded
	// up so that a pause never shows as none.
	PausedMs int64 `json:"paused_ms"`
}

// ReadRate reads name's rate state; has says whether there is any: a
// fleet rate, reservations, or a pause (the pause is per name, so a
// semaphore's name may have one). Errors are Inspector.Rate's.
func ReadRate(ctx context.Context, in *limiter.Inspector, name string) (v Rate, has bool, err error) {
	s, err := in.Rate(ctx, name)
	if err != nil {
		return Rate{}, false, err
	}
	return RateOf(s), s.Known || s.Fleet.Events > 0 || s.Paused > 0, nil
}

// RateOf is s as Rate shows it.
func RateOf(s limiter.RateState) Rate {
	v := Rate{PausedMs: CeilMs(s.Paused)}
	if s.Fleet.Events > 0 {
		v.FleetRate = RateJSONOf(s.Fleet)
	}
	if s.NextFree >= 0 {
		// The limiter's NextFree is the rate's alone: nothing goes
		// before the pause ends.
		ms := CeilMs(max(s.NextFree, s.Paused))
		v.NextFreeMs = &ms
	}
	return v
}

// RateJSONOf is r in JSON.
func RateJSONOf(r limiter.Rate) *RateJSON {
	return &RateJSON{Events: r.Events, Per: r.Per.String(), Burst: r.Burst}
}
