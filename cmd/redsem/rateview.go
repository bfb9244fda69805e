package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redsem/redsem/limiter"
)

// rateJSON is a rate in JSON: per as time.ParseDuration reads it, so that
// "EVENTS/PER burst BURST" is a RATE the rate command takes back.
type rateJSON struct {
	Events int64  `json:"events"`
	Per    string `json:"per"`
	Burst  int64  `json:"burst"`
}

// rateView is what Redis holds for a rate limit's name, as ls, show,
// watch and rate print it.
type rateView struct {
	// FleetRate is the rate stored by the rate command; nil (null, "-")
	// when none is: each process then uses its own, which Redis does not
	// know.
	FleetRate *rateJSON `json:"fleet_rate"`
	// NextFreeMs is how long until an event of cost 1 may go by the fleet
	// rate and the pause (0: now); nil (null, "-") when Redis holds
	// reservations but no fleet rate, so that it depends on each process's
	// own rate.
	NextFreeMs *int64 `json:"next_free_ms"`
	// PausedMs is how long the name stays paused (0: not paused), rounded
	// up so that a pause never shows as none.
	PausedMs int64 `json:"paused_ms"`
}

// readRate reads name's rate state; has says whether there is any: a
// fleet rate, reservations, or a pause (the pause is per name, so a
// semaphore's name may have one).
func readRate(ctx context.Context, in *limiter.Inspector, name string) (v rateView, has bool, err error) {
	s, err := in.Rate(ctx, name)
	if err != nil {
		return rateView{}, false, err
	}
	return rateViewOf(s), s.Known || s.Fleet.Events > 0 || s.Paused > 0, nil
}

func rateViewOf(s limiter.RateState) rateView {
	v := rateView{PausedMs: ceilMs(s.Paused)}
	if s.Fleet.Events > 0 {
		v.FleetRate = rateJSONOf(s.Fleet)
	}
	if s.NextFree >= 0 {
		// The limiter's NextFree is the rate's alone: nothing goes
		// before the pause ends.
		ms := ceilMs(max(s.NextFree, s.Paused))
		v.NextFreeMs = &ms
	}
	return v
}

func rateJSONOf(r limiter.Rate) *rateJSON {
	return &rateJSON{Events: r.Events, Per: r.Per.String(), Burst: r.Burst}
}

// ceilMs is d in whole milliseconds, rounded up: 300µs left is not "now".
func ceilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// noFleetRate is what show and rate say when no fleet rate is set.
const noFleetRate = "- (no fleet rate: each process uses its own)"

// rateText is a fleet rate as ParseRate reads it, "-" when none is set.
func rateText(r *rateJSON) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%d/%s burst %d", r.Events, r.Per, r.Burst)
}

// nextFreeText is "now", a wait, or "-" when unknown.
func nextFreeText(ms *int64) string {
	switch {
	case ms == nil:
		return "-"
	case *ms == 0:
		return "now"
	}
	return ttlText(*ms)
}

// pausedText is how long a name stays paused, "-" when it is not.
func pausedText(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return ttlText(ms)
}
