package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/redsem/redsem/internal/namestate"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// rateInfo is what rate NAME prints with -json.
type rateInfo struct {
	Name string `json:"name"`
	namestate.Rate
	Fleet bool `json:"fleet"` // a fleet rate is set
}

// setRateResult is what rate NAME RATE prints with -json.
type setRateResult struct {
	rateInfo                     // as read back; fleet_rate null when cleared
	Previous *namestate.RateJSON `json:"previous"` // null when none was set
}

// rateOff is the RATE that clears the fleet rate.
const rateOff = "off"

// rateCommand checks rate NAME [RATE [BURST]]: without RATE it reads the
// fleet rate, with RATE "off" it clears it, else it sets it.
func rateCommand(args []string) (action, error) {
	if err := checkArgs("rate", args, 1, 3, "NAME [RATE [BURST]]"); err != nil {
		return action{}, err
	}
	name := args[0]
	if len(args) == 1 {
		return simple(func(ctx context.Context, w io.Writer, c *limiter.Client, o options) error {
			return readRateCmd(ctx, w, c, name, o.json)
		}), nil
	}
	r, err := parseRateArgs(args[1:])
	if err != nil {
		return action{}, err
	}
	return simple(func(ctx context.Context, w io.Writer, c *limiter.Client, o options) error {
		return setRate(ctx, w, c, name, r, o.json)
	}), nil
}

// parseRateArgs reads RATE [BURST]: "off" is the zero Rate (clear). The
// burst is a positional argument, as operators type it, but RATE may also
// carry it as rate and ls print it ("100/1m0s burst 20"), once.
func parseRateArgs(args []string) (limiter.Rate, error) {
	text := args[0]
	if text == rateOff {
		if len(args) > 1 {
			return limiter.Rate{}, usagef("rate: %s takes no BURST", rateOff)
		}
		return limiter.Rate{}, nil
	}
	if len(args) > 1 {
		burst, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil || burst < 1 {
			return limiter.Rate{}, usagef("rate: BURST must be a whole number >= 1, not %q", args[1])
		}
		if strings.Contains(text, "burst") {
			return limiter.Rate{}, usagef("rate: the burst is given twice, in RATE %q and as BURST", text)
		}
		text += " burst " + args[1] // ParseRate checks its range
	}
	r, err := limiter.ParseRate(text)
	var ae *limiter.ArgumentError
	switch {
	case err == nil:
		return r, nil
	case errors.As(err, &ae) && ae.Arg == "rate.Burst":
		return limiter.Rate{}, usagef("rate: BURST %v: %s", ae.Value, ae.Reason)
	}
	return limiter.Rate{}, usagef("rate: RATE must be N/PERIOD such as 100/1m or 5/s, or %s: %v", rateOff, err)
}

// readRateCmd prints name's fleet rate, "-" when none is set, and its
// pause.
func readRateCmd(ctx context.Context, w io.Writer, c *limiter.Client, name string, asJSON bool) error {
	r, err := readRateInfo(ctx, inspect.New(c), name)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, r)
	}
	if r.Fleet {
		_, err = fmt.Fprintf(w, "%s: rate %s (fleet%s)\n", name, r.FleetRate.Text(), learnedNote(r.Learned))
	} else {
		_, err = fmt.Fprintf(w, "%s: rate %s\n", name, noFleetRate)
	}
	if err == nil && r.PausedMs > 0 {
		_, err = fmt.Fprintf(w, "%s: paused for %s\n", name, namestate.PausedText(r.PausedMs, ttlText))
	}
	return err
}

func readRateInfo(ctx context.Context, in *inspect.Inspector, name string) (rateInfo, error) {
	v, _, err := namestate.ReadRate(ctx, in, name)
	return rateInfo{Name: name, Rate: v, Fleet: v.FleetRate != nil}, err
}

// setRate stores r as the fleet rate of name (the zero Rate clears it),
// reads it back and says what it replaced. Events reserved already keep
// their times.
func setRate(ctx context.Context, w io.Writer, c *limiter.Client, name string, r limiter.Rate, asJSON bool) error {
	in := inspect.New(c)
	before, err := readRateInfo(ctx, in, name)
	if err != nil {
		return err
	}
	if err := in.SetRate(ctx, name, r); err != nil {
		return err
	}
	after, err := readRateInfo(ctx, in, name)
	if err != nil {
		return err
	}
	res := setRateResult{rateInfo: after, Previous: before.FleetRate}
	if asJSON {
		return writeJSON(w, res)
	}
	if !res.Fleet {
		_, err = fmt.Fprintf(w, "%s: fleet rate cleared (was %s%s): %s\n", name, res.Previous.Text(), learnedNote(before.Learned), clearedText(before.Learned, "rate"))
		return err
	}
	_, err = fmt.Fprintf(w, "%s: fleet rate %s (was %s%s)%s\n", name, res.FleetRate.Text(), res.Previous.Text(), learnedNote(before.Learned), pinnedText(res.Learned, name, "rate", rateOff))
	return err
}
