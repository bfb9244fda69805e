package namestate

import (
	"context"
	"fmt"
	"math"

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
	// Advertised is the rate the upstream advertises, which the rate is
	// set to (0: none); Ceiling the permits a learned limit is held at or
	// below after an overload under it (0: none in force).
	Advertised float64 `json:"advertised"`
	Ceiling    float64 `json:"ceiling"`
	// LastMove is why Value last moved (a Move), SinceMoveMs how long ago.
	LastMove    string `json:"last_move"`
	SinceMoveMs int64  `json:"since_move_ms"`
	Pinned      bool   `json:"pinned"` // an operator set the value (SetLimit, SetRate)
}

// Why a learned value last moved (Learned.LastMove), read from its state
// as adapt.lua's law moves it: only a cut moves it at its overload's
// time; an advertisement sets it to the quota, which nothing grows past.
const (
	MoveGrow       = "grow"       // up while all used (or not moved since its start)
	MoveOverload   = "overload"   // cut by a 429 or 503
	MoveAdvertised = "advertised" // set to the quota the upstream advertises
)

// LearnedOf is l as show writes it (nil for nil).
func LearnedOf(l *inspect.Learned) *Learned {
	if l == nil {
		return nil
	}
	out := &Learned{Min: l.Min, Max: l.Max, Value: l.Value, Overload: l.Overload, SinceMs: CeilMs(l.Since),
		Advertised: l.Advertised, Ceiling: l.Ceiling, SinceMoveMs: CeilMs(l.Moved), Pinned: l.Pinned}
	switch {
	case l.Pinned:
	case l.Overload > 0 && l.Moved == l.Since:
		out.LastMove = MoveOverload
	case l.Advertised > 0 && math.Abs(l.Value-min(max(l.Advertised, float64(l.Min)), float64(l.Max))) < 0.001:
		// (The state keeps the value to 3 decimals, the quota to 6 digits.)
		out.LastMove = MoveAdvertised
	default:
		out.LastMove = MoveGrow
	}
	return out
}

// LearnedText says what l learned, within which bounds, and why it last
// moved: "18.4 within 1..30; last overload at 19.0, 12s ago; up while all
// used 3s ago".
func LearnedText(l *Learned, ago func(int64) string) string {
	switch {
	case l == nil:
		return "-"
	case l.Pinned:
		return "pinned (set by redsem limit or rate; clear it to learn again)"
	}
	txt := fmt.Sprintf("%.1f within %d..%d", l.Value, l.Min, l.Max)
	if l.Overload == 0 {
		txt += "; no overload yet (growing while all used)"
	} else {
		txt += fmt.Sprintf("; last overload at %.1f, %s ago", l.Overload, ago(l.SinceMs))
	}
	switch {
	case l.LastMove == MoveGrow && l.Overload == 0: // or its start
		txt += fmt.Sprintf("; last moved %s ago", ago(l.SinceMoveMs))
	case l.LastMove == MoveGrow:
		txt += fmt.Sprintf("; up while all used %s ago", ago(l.SinceMoveMs))
	case l.LastMove == MoveAdvertised:
		return txt + fmt.Sprintf("; set to the advertised %.4g %s ago", l.Advertised, ago(l.SinceMoveMs))
	}
	if l.Advertised > 0 {
		txt += fmt.Sprintf("; advertised %.4g", l.Advertised)
	}
	if l.Ceiling > 0 {
		txt += fmt.Sprintf("; held at most %.4g until 30s after the overload", l.Ceiling)
	}
	return txt
}

// BoundsText is l in a few words, for a column: "learned 1..30",
// "pinned" ("" for nil).
func BoundsText(l *Learned) string {
	switch {
	case l == nil:
		return ""
	case l.Pinned:
		return "pinned"
	}
	return fmt.Sprintf("learned %d..%d", l.Min, l.Max)
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
