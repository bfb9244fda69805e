package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"text/tabwriter"

	"github.com/redsem/redsem/limiter"
)

// The kinds of what ls lists: a name may be both, on two lines.
const (
	kindSemaphore = "semaphore"
	kindRate      = "rate"
)

// lsEntry is a line of ls: a semaphore without its holders' details, or a
// rate limit. Every field is in every entry, so that scripts written
// before rate limits read a rate's line as an unused semaphore.
type lsEntry struct {
	Name       string `json:"name"`
	Kind       string `json:"kind"`        // kindSemaphore or kindRate
	FleetLimit *int64 `json:"fleet_limit"` // null when none is set, and for a rate
	InUse      int64  `json:"in_use"`
	Holders    int    `json:"holders"`
	Waiters    int    `json:"waiters"` // requests in the wait queue
	// A rate's; null for a semaphore.
	FleetRate  *rateJSON `json:"fleet_rate"`
	NextFreeMs *int64    `json:"next_free_ms"`
	// PausedMs is the name's pause, which semaphore and rate share.
	PausedMs int64 `json:"paused_ms"`
}

// lsParallel bounds the names read at once.
const lsParallel = 16

// ls lists the semaphores and rate limits under the Client's prefix whose
// names match the glob pattern ("" = all), sorted by name, a semaphore
// before the rate limit of the same name.
func ls(ctx context.Context, w io.Writer, c *limiter.Client, pattern string, asJSON bool) error {
	in := c.Inspector()
	sems, err := in.Names(ctx, pattern)
	if err != nil {
		return err
	}
	rates, err := in.RateNames(ctx, pattern)
	if err != nil {
		return err
	}
	semEntries, err := readEach(ctx, sems, func(ctx context.Context, name string) (lsEntry, error) {
		return semEntry(ctx, c, name)
	})
	if err != nil {
		return err
	}
	rateEntries, err := readEach(ctx, rates, func(ctx context.Context, name string) (lsEntry, error) {
		return rateEntry(ctx, in, name)
	})
	if err != nil {
		return err
	}
	entries := append(semEntries, rateEntries...)
	slices.SortStableFunc(entries, func(a, b lsEntry) int { return cmp.Compare(a.Name, b.Name) })
	if asJSON {
		return writeJSON(w, entries)
	}
	return writeLs(w, entries)
}

func semEntry(ctx context.Context, c *limiter.Client, name string) (lsEntry, error) {
	st, err := inspect(ctx, c, name)
	e := lsEntry{Name: name, Kind: kindSemaphore, FleetLimit: st.FleetLimit, InUse: st.InUse, Holders: len(st.Holders), Waiters: len(st.Waiters)}
	if st.Rate != nil {
		e.PausedMs = st.Rate.PausedMs
	}
	return e, err
}

func rateEntry(ctx context.Context, in *limiter.Inspector, name string) (lsEntry, error) {
	v, _, err := readRate(ctx, in, name)
	return lsEntry{Name: name, Kind: kindRate, FleetRate: v.FleetRate, NextFreeMs: v.NextFreeMs, PausedMs: v.PausedMs}, err
}

// readEach reads every name, lsParallel at once; the first error (in
// names' order) wins.
func readEach(ctx context.Context, names []string, read func(context.Context, string) (lsEntry, error)) ([]lsEntry, error) {
	entries := make([]lsEntry, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	turn := make(chan struct{}, lsParallel)
	for i, name := range names {
		wg.Add(1)
		turn <- struct{}{}
		go func() {
			defer func() { <-turn; wg.Done() }()
			entries[i], errs[i] = read(ctx, name)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return entries, nil
}

// writeLs is the table of ls. A column that does not apply to a kind
// shows "-": a rate's LIMIT is its fleet rate.
func writeLs(w io.Writer, entries []lsEntry) error {
	if len(entries) == 0 {
		_, err := fmt.Fprintln(w, "no semaphores or rate limits")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tLIMIT\tIN USE\tHOLDERS\tWAITERS\tNEXT FREE\tPAUSED")
	for _, e := range entries {
		if e.Kind == kindRate {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t%s\t%s\n", e.Name, e.Kind, rateText(e.FleetRate), nextFreeText(e.NextFreeMs), pausedText(e.PausedMs))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t-\t%s\n", e.Name, e.Kind, limitText(e.FleetLimit), e.InUse, e.Holders, e.Waiters, pausedText(e.PausedMs))
	}
	return tw.Flush()
}
