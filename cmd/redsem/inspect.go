package main

import (
	"encoding/json"
	"io"
	"strconv"
	"time"
)

// ls, show and watch print what internal/namestate reads: a name's
// fleet limit, holders, wait queue and rate state, in JSON with its field
// names.

// noFleetLimit is what show and limit say when no fleet limit is set.
const noFleetLimit = "- (no fleet limit: each process uses its own)"

// limitText is a fleet limit for a table: "-" when none is set.
func limitText(l *int64) string {
	if l == nil {
		return "-"
	}
	return strconv.FormatInt(*l, 10)
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
