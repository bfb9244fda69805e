package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/redsem/redsem/internal/namestate"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// ls lists the semaphores and rate limits under the Client's prefix whose
// names match the glob pattern ("" = all), sorted by name, a semaphore
// before the rate limit of the same name.
func ls(ctx context.Context, w io.Writer, c *limiter.Client, pattern string, asJSON bool) error {
	entries, err := namestate.List(ctx, inspect.New(c), pattern)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, entries)
	}
	return writeLs(w, entries)
}

// writeLs is the table of ls. A column that does not apply to a kind
// shows "-". LIMIT is the fleet limit, else the limits the processes
// apply ("5 (2 procs), 4 (1 proc)" where they disagree); a rate's is its
// rate, likewise. A learned one says so, with its bounds: "18 (learned
// 1..30)", or "(pinned)".
func writeLs(w io.Writer, entries []namestate.Entry) error {
	if len(entries) == 0 {
		_, err := fmt.Fprintln(w, "no semaphores or rate limits")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tLIMIT\tIN USE\tHOLDERS\tWAITERS\tNEXT FREE\tPAUSED")
	for _, e := range entries {
		if e.Kind == namestate.KindRate {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t%s\t%s\n", e.Name, e.Kind, learnedMark(rateInUseText(e.FleetRate, e.Rates, false), e.Learned), namestate.NextFreeText(e.NextFreeMs, ttlText), namestate.PausedText(e.PausedMs, ttlText))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t-\t%s\n", e.Name, e.Kind, learnedMark(limitInUseText(e.FleetLimit, e.Limits, false), e.Learned), e.InUse, e.Holders, e.Waiters, namestate.PausedText(e.PausedMs, ttlText))
	}
	return tw.Flush()
}

// learnedMark is v, marked learned or pinned when l is not nil.
func learnedMark(v string, l *namestate.Learned) string {
	if l == nil {
		return v
	}
	return v + " (" + namestate.BoundsText(l) + ")"
}
