package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/redsem/redsem/internal/namestate"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// pauseResult is what pause prints with -json.
type pauseResult struct {
	Name string `json:"name"`
	// PausedMs is how long name is paused for from now: more than AskedMs
	// when a longer pause stands (a pause never shortens one).
	PausedMs int64 `json:"paused_ms"`
	AskedMs  int64 `json:"asked_ms"`
}

// unpauseResult is what unpause prints with -json.
type unpauseResult struct {
	Name        string `json:"name"`
	WasPausedMs int64  `json:"was_paused_ms"` // 0: it was not paused
}

// pauseCommand checks pause NAME DURATION.
func pauseCommand(args []string) (action, error) {
	if err := checkArgs("pause", args, 2, 2, "NAME DURATION"); err != nil {
		return action{}, err
	}
	d, err := time.ParseDuration(args[1])
	if err != nil || d <= 0 {
		return action{}, usagef("pause: DURATION must be a duration above 0 such as 30s or 5m, not %q", args[1])
	}
	return simple(func(ctx context.Context, w io.Writer, c *limiter.Client, o options) error {
		return pause(ctx, w, c, args[0], d, o.json)
	}), nil
}

// unpauseCommand checks unpause NAME.
func unpauseCommand(args []string) (action, error) {
	if err := checkArgs("unpause", args, 1, 1, "NAME"); err != nil {
		return action{}, err
	}
	return simple(func(ctx context.Context, w io.Writer, c *limiter.Client, o options) error {
		return unpause(ctx, w, c, args[0], o.json)
	}), nil
}

// pause makes name (its semaphore and rate limits) grant nothing for d, fleet-wide, and
// says how long it is paused for: longer than d when a longer pause
// stands, which pause never shortens.
func pause(ctx context.Context, w io.Writer, c *limiter.Client, name string, d time.Duration, asJSON bool) error {
	left, err := inspect.New(c).Pause(ctx, name, d)
	if errors.Is(err, limiter.ErrInvalidArgument) { // above the limiter's longest pause
		return usagef("pause: DURATION %v: %v", d, err)
	}
	if err != nil {
		return err
	}
	r := pauseResult{Name: name, PausedMs: namestate.CeilMs(left), AskedMs: namestate.CeilMs(d)}
	if asJSON {
		return writeJSON(w, r)
	}
	if left > d {
		_, err = fmt.Fprintf(w, "%s: paused for %s: a longer pause stands (pause never shortens one; unpause lifts it)\n", name, namestate.PausedText(r.PausedMs, ttlText))
		return err
	}
	_, err = fmt.Fprintf(w, "%s: paused for %s\n", name, namestate.PausedText(r.PausedMs, ttlText))
	return err
}

// unpause lifts name's pause and says how long it had left.
func unpause(ctx context.Context, w io.Writer, c *limiter.Client, name string, asJSON bool) error {
	in := inspect.New(c)
	before, _, err := namestate.ReadRate(ctx, in, name)
	if err != nil {
		return err
	}
	if err := in.Unpause(ctx, name); err != nil {
		return err
	}
	r := unpauseResult{Name: name, WasPausedMs: before.PausedMs}
	if asJSON {
		return writeJSON(w, r)
	}
	if r.WasPausedMs == 0 {
		_, err = fmt.Fprintf(w, "%s: was not paused\n", name)
		return err
	}
	_, err = fmt.Fprintf(w, "%s: unpaused (%s of its pause were left)\n", name, namestate.PausedText(r.WasPausedMs, ttlText))
	return err
}
