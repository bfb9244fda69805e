package namestate

import (
	"context"
	"fmt"

	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
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
	// Learned is the state of a rate learned fleet-wide
	// (limiter.Adaptive); nil (null) for a fixed rate.
	Learned *Learned `json:"learned"`
}

// Learned is a learned limit's or rate's state, in permits or events
// per the rate's period.
type Learned struct {
	Min      int64   `json:"min"`
	Max      int64   `json:"max"`
	Value    float64 `json:"value"`
	Overload float64 `json:"last_overload_rate"` // 0: none yet
	SinceMs  int64   `json:"since_overload_ms"`
	Pinned   bool    `json:"pinned"` // an operator set the rate (SetRate)
}

// LearnedOf is l as show writes it (nil for nil).
func LearnedOf(l *inspect.Learned) *Learned {
	if l == nil {
		return nil
	}
	return &Learned{Min: l.Min, Max: l.Max, Value: l.Value, Overload: l.Overload, SinceMs: CeilMs(l.Since), Pinned: l.Pinned}
}

// LearnedText says what l learned: "18.4 within 1..30; last overload at
// 19.0, 12s ago".
func LearnedText(l *Learned, ago func(int64) string) string {
	switch {
	case l == nil:
		return "-"
	case l.Pinned:
		return "pinned (set by redsem limit or rate; clear it to learn again)"
	}
	txt := fmt.Sprintf("%.1f within %d..%d", l.Value, l.Min, l.Max)
	if l.Overload == 0 {
		return txt + "; no overload yet (growing while all used)"
	}
	return txt + fmt.Sprintf("; last overload at %.1f, %s ago", l.Overload, ago(l.SinceMs))
}

// ReadRate reads name's rate state; has says whether there is any: a
// fleet rate, reservations, or a pause (the pause is per name, so a
// semaphore's name may have one). Errors are Inspector.Rate's.
func ReadRate(ctx context.Context, in *inspect.Inspector, name string) (v Rate, has bool, err error) {
	s, err := in.Rate(ctx, name)
	if err != nil {
		return Rate{}, false, err
	}
	return RateOf(s), s.Known || s.Fleet.Events > 0 || s.Paused > 0, nil
}

// RateOf is s as Rate shows it.
func RateOf(s inspect.RateState) Rate {
	v := Rate{PausedMs: CeilMs(s.Paused)}
	v.Learned = LearnedOf(s.Learned)
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
