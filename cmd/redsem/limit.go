package main

import (
	"context"
	"fmt"
	"io"

	"github.com/redsem/redsem/internal/namestate"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// limitInfo is what limit NAME prints with -json.
type limitInfo struct {
	Name string `json:"name"`
	// FleetLimit is the limit stored in Redis, which every process obeys;
	// null when none is set: each process then uses its own, which Redis
	// does not know.
	FleetLimit *int64 `json:"fleet_limit"`
	Fleet      bool   `json:"fleet"` // a fleet limit is set
	// Learned is the state of a learned limit (then FleetLimit is what
	// it learned), or pinned; null for a fixed limit.
	Learned *namestate.Learned `json:"learned"`
}

// setLimitResult is what limit NAME N prints with -json.
type setLimitResult struct {
	limitInfo        // as read back; fleet_limit null when cleared
	Previous  *int64 `json:"previous"` // null when none was set
	InUse     int64  `json:"in_use"`
}

// readLimit prints the limit that name's grants obey when it is a fleet
// limit, and "-" when none is set.
func readLimit(ctx context.Context, w io.Writer, c *limiter.Client, name string, asJSON bool) error {
	r, err := readLimitInfo(ctx, inspect.New(c), name)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, r)
	}
	if r.Fleet {
		_, err = fmt.Fprintf(w, "%s: limit %d (fleet%s)\n", name, *r.FleetLimit, learnedNote(r.Learned))
	} else {
		_, err = fmt.Fprintf(w, "%s: limit %s\n", name, noFleetLimit)
	}
	return err
}

func readLimitInfo(ctx context.Context, in *inspect.Inspector, name string) (limitInfo, error) {
	l, err := namestate.FleetLimit(ctx, in, name)
	if err != nil {
		return limitInfo{}, err
	}
	u, err := in.InUse(ctx, name)
	return limitInfo{Name: name, FleetLimit: l, Fleet: l != nil, Learned: namestate.LearnedOf(u.Learned)}, err
}

// setLimit stores n as the fleet-wide limit of name (0 clears it), reads
// it back and says what it replaced and how many permits were in use.
// Holders are never evicted: above the new limit, new grants wait until
// the permits in use fit.
func setLimit(ctx context.Context, w io.Writer, c *limiter.Client, name string, n int64, asJSON bool) error {
	in := inspect.New(c)
	before, err := readLimitInfo(ctx, in, name)
	if err != nil {
		return err
	}
	hs, err := in.Holders(ctx, name)
	if err != nil {
		return err
	}
	if err := in.SetLimit(ctx, name, n); err != nil {
		return err
	}
	after, err := readLimitInfo(ctx, in, name)
	if err != nil {
		return err
	}
	_, inUse := namestate.HoldersOf(hs)
	r := setLimitResult{limitInfo: after, Previous: before.FleetLimit, InUse: inUse}
	if asJSON {
		return writeJSON(w, r)
	}
	if !r.Fleet {
		_, err = fmt.Fprintf(w, "%s: fleet limit cleared (was %s%s): %s\n", name, limitText(r.Previous), learnedNote(before.Learned), clearedText(before.Learned, "limit"))
		return err
	}
	if _, err = fmt.Fprintf(w, "%s: fleet limit %d (was %s%s)%s\n", name, *r.FleetLimit, limitText(r.Previous), learnedNote(before.Learned), pinnedText(r.Learned, name, "limit", "0")); err != nil {
		return err
	}
	if r.InUse > *r.FleetLimit {
		_, err = fmt.Fprintf(w, "%d permits are in use: their holders keep them; new grants wait until the permits in use fit\n", r.InUse)
	}
	return err
}

// learnedNote is ", learned 1..30" or ", pinned" for a learned value ("" for
// a fixed one).
func learnedNote(l *namestate.Learned) string {
	if l == nil {
		return ""
	}
	return ", " + namestate.BoundsText(l)
}

// clearedText says what clearing a fleet limit or rate (what) that was
// learned (l) or not does.
func clearedText(l *namestate.Learned, what string) string {
	if l != nil {
		return "what was learned is forgotten: learning starts again from its start"
	}
	return "each process uses its own " + what + " again"
}

// pinnedText says that a value set is pinned, when it was learned: ":
// pinned; `redsem limit NAME 0` learns again".
func pinnedText(l *namestate.Learned, name, cmd, clear string) string {
	if l == nil || !l.Pinned {
		return ""
	}
	return fmt.Sprintf(": pinned, nothing moves it; `redsem %s %s %s` clears it and learning starts again", cmd, name, clear)
}
