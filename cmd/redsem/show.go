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

// show prints a semaphore's fleet limit, permits in use, holders and wait
// queue, and the fleet rate, next free time and pause of the rate limit of
// the same name when it has any.
func show(ctx context.Context, w io.Writer, c *limiter.Client, name string, asJSON bool) error {
	st, err := namestate.Read(ctx, inspect.New(c), name)
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
	switch {
	case st.FleetLimit != nil && len(st.Limits) > 0:
		limit += "; the processes' own: " + namestate.LimitsText(st.Limits, true)
	case st.FleetLimit == nil && len(st.Limits) > 0:
		limit = "the processes' own: " + namestate.LimitsText(st.Limits, true)
	case st.FleetLimit == nil:
		limit = noLimitInUse
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", st.Name)
	fmt.Fprintf(tw, "limit:\t%s\n", limit)
	if st.Learned != nil {
		fmt.Fprintf(tw, "learned:\t%s\n", namestate.LearnedText(st.Learned, ttlText))
	}
	fmt.Fprintf(tw, "in use:\t%s\n", inUseOf(st))
	fmt.Fprintf(tw, "holders:\t%d\n", len(st.Holders))
	fmt.Fprintf(tw, "waiters:\t%d\n", len(st.Waiters))
	if st.Rate != nil || len(st.Rates) > 0 {
		writeRate(tw, st.Rate, st.Rates)
	}
	if len(st.Holders) > 0 {
		fmt.Fprintln(tw, "\nID\tWEIGHT\tTOKEN\tTTL")
		for _, h := range st.Holders {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", h.ID, h.Weight, h.Token, ttlText(h.TTLms))
		}
	}
	if len(st.Waiters) > 0 {
		fmt.Fprintln(tw, "\nQUEUE\tWAIT ID\tWEIGHT\tTTL\tWHY\tETA")
		for i, q := range st.Waiters {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\n", i+1, q.ID, q.Weight, ttlText(q.TTLms),
				namestate.ReasonText(q.Why), namestate.ETAText(q.Why, ttlText))
		}
	}
	return tw.Flush()
}

// writeRate is the rate section of show, after a blank line: the fleet
// rate or the processes' own, when the next event may go by the fleet
// rate, and the pause. v is nil when Redis holds no rate state.
func writeRate(w io.Writer, pv *namestate.Rate, rates []namestate.RateInUse) {
	var v namestate.Rate
	if pv != nil {
		v = *pv
	}
	rate := v.FleetRate.Text() + " (fleet)"
	switch {
	case v.FleetRate != nil && len(rates) > 0:
		rate += "; the processes' own: " + namestate.RatesText(rates, true)
	case v.FleetRate == nil && len(rates) > 0:
		rate = "the processes' own: " + namestate.RatesText(rates, true)
	case v.FleetRate == nil:
		rate = noFleetRate
	}
	next := namestate.NextFreeText(v.NextFreeMs, ttlText)
	if v.NextFreeMs == nil {
		next += " (by each process's own rate)"
	}
	fmt.Fprintf(w, "\nrate:\t%s\n", rate)
	if v.Learned != nil {
		fmt.Fprintf(w, "learned:\t%s\n", namestate.LearnedText(v.Learned, ttlText))
	}
	fmt.Fprintf(w, "next free:\t%s\n", next)
	fmt.Fprintf(w, "paused for:\t%s\n", namestate.PausedText(v.PausedMs, ttlText))
}
