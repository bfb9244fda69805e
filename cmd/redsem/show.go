package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/redsem/redsem/internal/namestate"
	"github.com/redsem/redsem/limiter"
)

// show prints a semaphore's fleet limit, permits in use, holders and wait
// queue, and the fleet rate, next free time and pause of the rate limit of
// the same name when it has any.
func show(ctx context.Context, w io.Writer, c *limiter.Client, name string, asJSON bool) error {
	st, err := namestate.Read(ctx, c.Inspector(), name)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, st)
	}
	return writeState(w, st)
}

// writeState is the text of show, and a screen of watch. One tabwriter
// aligns the parts apart: a line without a tab ends a column block.
func writeState(w io.Writer, st namestate.State) error {
	limit := limitText(st.FleetLimit) + " (fleet)"
	if st.FleetLimit == nil {
		limit = noFleetLimit
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", st.Name)
	fmt.Fprintf(tw, "limit:\t%s\n", limit)
	fmt.Fprintf(tw, "in use:\t%d\n", st.InUse)
	fmt.Fprintf(tw, "holders:\t%d\n", len(st.Holders))
	fmt.Fprintf(tw, "waiters:\t%d\n", len(st.Waiters))
	if st.Rate != nil {
		writeRate(tw, *st.Rate)
	}
	if len(st.Holders) > 0 {
		fmt.Fprintln(tw, "\nID\tWEIGHT\tTOKEN\tTTL")
		for _, h := range st.Holders {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", h.ID, h.Weight, h.Token, ttlText(h.TTLms))
		}
	}
	if len(st.Waiters) > 0 {
		fmt.Fprintln(tw, "\nQUEUE\tWAIT ID\tWEIGHT\tTTL")
		for i, q := range st.Waiters {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\n", i+1, q.ID, q.Weight, ttlText(q.TTLms))
		}
	}
	return tw.Flush()
}

// writeRate is the rate section of show, after a blank line: the fleet
// rate, when the next event may go by it, and the pause.
func writeRate(w io.Writer, v namestate.Rate) {
	rate := v.FleetRate.Text() + " (fleet)"
	if v.FleetRate == nil {
		rate = noFleetRate
	}
	next := namestate.NextFreeText(v.NextFreeMs, ttlText)
	if v.NextFreeMs == nil {
		next += " (by each process's own rate)"
	}
	fmt.Fprintf(w, "\nrate:\t%s\n", rate)
	fmt.Fprintf(w, "next free:\t%s\n", next)
	fmt.Fprintf(w, "paused for:\t%s\n", namestate.PausedText(v.PausedMs, ttlText))
}
