package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"text/tabwriter"

	"github.com/redsem/redsem/limiter"
)

// lsEntry is a line of ls: a semaphore without its holders' details.
type lsEntry struct {
	Name       string `json:"name"`
	FleetLimit *int64 `json:"fleet_limit"` // null when none is set
	InUse      int64  `json:"in_use"`
	Holders    int    `json:"holders"`
	Waiters    int    `json:"waiters"` // requests in the wait queue
}

// lsParallel bounds the semaphores read at once.
const lsParallel = 16

// ls lists the semaphores under the Client's prefix whose names match the
// glob pattern ("" = all), sorted by name.
func ls(ctx context.Context, w io.Writer, c *limiter.Client, pattern string, asJSON bool) error {
	names, err := c.Inspector().Names(ctx, pattern) // sorted
	if err != nil {
		return err
	}
	entries := make([]lsEntry, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	turn := make(chan struct{}, lsParallel)
	for i, name := range names {
		wg.Add(1)
		turn <- struct{}{}
		go func() {
			defer func() { <-turn; wg.Done() }()
			st, err := inspect(ctx, c, name)
			entries[i] = lsEntry{Name: name, FleetLimit: st.FleetLimit, InUse: st.InUse, Holders: len(st.Holders), Waiters: len(st.Waiters)}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}

	if asJSON {
		return writeJSON(w, entries)
	}
	if len(entries) == 0 {
		_, err := fmt.Fprintln(w, "no semaphores")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tLIMIT\tIN USE\tHOLDERS\tWAITERS")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", e.Name, limitText(e.FleetLimit), e.InUse, e.Holders, e.Waiters)
	}
	return tw.Flush()
}
