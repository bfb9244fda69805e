package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/redsem/redsem/internal/namestate"
)

// ls, show and watch print what internal/namestate reads: a name's
// fleet limit, holders, wait queue and rate state, in JSON with its field
// names.

// noFleetLimit is what show and limit say when no fleet limit is set.
const noFleetLimit = "- (no fleet limit: each process uses its own)"

// noLimitInUse is what show says when neither a fleet limit nor a
// process's own limit is known.
const noLimitInUse = "- (no fleet limit, and no process recorded its own lately)"

// limitText is a fleet limit for a table: "-" when none is set.
func limitText(l *int64) string {
	if l == nil {
		return "-"
	}
	return strconv.FormatInt(*l, 10)
}

// limitInUseText is what a name's semaphore runs at: its fleet limit,
// else the limits its processes apply (with counts: "5 (3 procs)"), else
// "-".
func limitInUseText(fleet *int64, limits []namestate.LimitInUse, counts bool) string {
	if fleet != nil {
		return limitText(fleet)
	}
	return namestate.LimitsText(limits, counts)
}

// rateInUseText is limitInUseText for a rate.
func rateInUseText(fleet *namestate.RateJSON, rates []namestate.RateInUse, counts bool) string {
	if fleet != nil {
		return fleet.Text()
	}
	return namestate.RatesText(rates, counts)
}

// inUseOf is "4 of 5" when the limit the name runs at is known, else
// "4".
func inUseOf(st namestate.State) string {
	if l := namestate.Effective(st.FleetLimit, st.Limits); l != nil {
		return fmt.Sprintf("%d of %d", st.InUse, *l)
	}
	return strconv.FormatInt(st.InUse, 10)
}

// noFleetRate is what show and rate say when no fleet rate is set.
const noFleetRate = "- (no fleet rate: each process uses its own)"

func ttlText(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).String()
}

func writeJSON(w io.Writer, v any) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(v)
}
