package main

import (
	"fmt"

	"github.com/redsem/redsem/internal/namestate"
)

// noFleetRate is what show and rate say when no fleet rate is set.
const noFleetRate = "- (no fleet rate: each process uses its own)"

// rateText is a fleet rate as ParseRate reads it, "-" when none is set.
func rateText(r *namestate.RateJSON) string {
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
