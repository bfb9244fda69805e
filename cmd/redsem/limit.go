package main

import (
	"context"
	"fmt"
	"io"

	"github.com/redsem/redsem/limiter"
)

// limitInfo is what limit NAME prints with -json.
type limitInfo struct {
	Name string `json:"name"`
	// FleetLimit is the limit stored in Redis, which every process obeys;
	// null when none is set: each process then uses its own, which Redis
	// does not know.
	FleetLimit *int64 `json:"fleet_limit"`
	Fleet      bool   `json:"fleet"` // a fleet limit is set
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
	sem, err := c.Semaphore(name, 1)
	if err != nil {
		return err
	}
	r, err := fleetLimit(ctx, sem)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, r)
	}
	if r.Fleet {
		_, err = fmt.Fprintf(w, "%s: limit %d (fleet)\n", name, *r.FleetLimit)
	} else {
		_, err = fmt.Fprintf(w, "%s: limit %s\n", name, noFleetLimit)
	}
	return err
}

// fleetLimit reads sem's fleet limit. The Semaphore's own limit is not
// the processes' (redsem makes it up), so only a fleet limit is reported.
func fleetLimit(ctx context.Context, sem *limiter.Semaphore) (limitInfo, error) {
	r := limitInfo{Name: sem.Name()}
	limit, fleet, err := sem.EffectiveLimit(ctx)
	if err != nil {
		return r, err
	}
	if fleet {
		r.FleetLimit, r.Fleet = &limit, true
	}
	return r, nil
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
	after, err := fleetLimit(ctx, sem)
	if err != nil {
		return err
	}
	r := setLimitResult{limitInfo: after, Previous: before.FleetLimit, InUse: before.InUse}
	if asJSON {
		return writeJSON(w, r)
	}
	if !r.Fleet {
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
