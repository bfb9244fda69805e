package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/redsem/redsem/limiter"
)

// show prints a semaphore's fleet limit, permits in use and holders.
func show(ctx context.Context, w io.Writer, c *limiter.Client, name string, asJSON bool) error {
	st, err := inspect(ctx, c, name)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, st)
	}
	limit := limitText(st.FleetLimit) + " (fleet)"
	if st.FleetLimit == nil {
		limit = "- (no fleet limit: each process uses its own)"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", st.Name)
	fmt.Fprintf(tw, "limit:\t%s\n", limit)
	fmt.Fprintf(tw, "in use:\t%d\n", st.InUse)
	fmt.Fprintf(tw, "holders:\t%d\n", len(st.Holders))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Holders) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tWEIGHT\tTOKEN\tTTL")
	for _, h := range st.Holders {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", h.ID, h.Weight, h.Token, ttlText(h.TTLms))
	}
	return tw.Flush()
}
