package main

import (
	"context"
	"fmt"
	"io"

	"github.com/redsem/redsem/limiter"
)

// setLimitResult is what set-limit prints with -json.
type setLimitResult struct {
	Name       string `json:"name"`
	FleetLimit *int64 `json:"fleet_limit"` // as read back; null when cleared
	Previous   *int64 `json:"previous"`    // null when none was set
	InUse      int64  `json:"in_use"`
}

// setLimit stores n as the fleet-wide limit of name (0 clears it), reads
// it back and says what it replaced. Holders are never evicted: above the
// new limit, new grants wait until the permits in use fit.
func setLimit(ctx context.Context, w io.Writer, c *limiter.Client, name string, n int64, asJSON bool) error {
	before, err := inspect(ctx, c, name)
	if err != nil {
		return err
	}
	sem, err := c.Semaphore(name, 1)
	if err != nil {
		return err
	}
	if err := sem.SetLimit(ctx, n); err != nil {
		return err
	}
	limit, fleet, err := sem.EffectiveLimit(ctx)
	if err != nil {
		return err
	}
	r := setLimitResult{Name: name, Previous: before.FleetLimit, InUse: before.InUse}
	if fleet {
		r.FleetLimit = &limit
	}
	if asJSON {
		return writeJSON(w, r)
	}
	if r.FleetLimit == nil {
		_, err = fmt.Fprintf(w, "%s: fleet limit cleared (was %s): each process uses its own limit again\n", name, limitText(r.Previous))
		return err
	}
	if _, err = fmt.Fprintf(w, "%s: fleet limit %d (was %s)\n", name, *r.FleetLimit, limitText(r.Previous)); err != nil {
		return err
	}
	if r.InUse > *r.FleetLimit {
		_, err = fmt.Fprintf(w, "%d permits are in use: their holders keep them; new grants wait until the permits in use fit\n", r.InUse)
	}
	return err
}
