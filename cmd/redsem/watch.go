package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redsem/redsem/internal/namestate"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// watchOptions say how watch polls and prints.
type watchOptions struct {
	tty      bool          // redraw a screen in place instead of a line per change
	json     bool          // a JSON object per change (also on a terminal)
	interval time.Duration // between polls
	timeout  time.Duration // bounds each poll
}

// watchEvent is a change, with -json: the state as show -json prints it,
// and when it was read.
type watchEvent struct {
	Time time.Time `json:"time"`
	namestate.State
}

// watchError is a poll that failed, with -json.
type watchError struct {
	Time  time.Time `json:"time"`
	Name  string    `json:"name"`
	Error string    `json:"error"`
}

// Terminal control: cursor home, clear to the end of the line, clear to
// the end of the screen, clear the screen.
const (
	ansiHome      = "\x1b[H"
	ansiClearEOL  = "\x1b[K"
	ansiClearDown = "\x1b[J"
	ansiClear     = "\x1b[2J"
)

// watch reads name's state every o.interval until ctx ends, then returns
// nil. On a terminal (o.tty without o.json) it redraws the view of show
// in place at every poll, so the TTLs count down; otherwise it writes a
// line (or with o.json a JSON object) only when something other than the
// TTLs changed: the limit, a holder (id, weight, token), a waiter (id,
// weight), the fleet rate, or whether the name is paused (not the rate's
// times, which count down as TTLs do). o.interval must be > 0 (parse
// checks -interval). The first poll's error is returned (a wrong address or name should not leave an
// operator staring at a screen); a later one is shown as a change, and
// polling goes on.
func watch(ctx context.Context, w io.Writer, c *limiter.Client, name string, o watchOptions) error {
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	last := ""
	for polls := 0; ; polls++ {
		st, err := poll(ctx, c, name, o.timeout)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && polls == 0 {
			return err
		}
		now := time.Now()
		key := changeKey(st, err)
		var werr error
		switch {
		case o.tty && !o.json:
			werr = drawScreen(w, name, st, err, now, o.interval, polls == 0)
		case key == last:
		case o.json && err != nil:
			werr = json.NewEncoder(w).Encode(watchError{Time: now, Name: name, Error: err.Error()})
		case o.json:
			werr = json.NewEncoder(w).Encode(watchEvent{Time: now, State: st})
		default:
			_, werr = io.WriteString(w, changeLine(name, st, err, now))
		}
		if werr != nil {
			return werr
		}
		last = key
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// poll reads name's state within timeout.
func poll(ctx context.Context, c *limiter.Client, name string, timeout time.Duration) (namestate.State, error) {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := namestate.Read(pctx, inspect.New(c), name)
	return st, withTimeout(pctx, err, timeout)
}

// changeKey is what watch compares between polls: the state without its
// TTLs and a rate's times, which change at every poll, or the error.
func changeKey(st namestate.State, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%d", limitText(st.FleetLimit), namestate.LimitsText(st.Limits, true), st.InUse)
	for _, h := range st.Holders {
		fmt.Fprintf(&b, "|h %q %d %d", h.ID, h.Weight, h.Token)
	}
	for _, q := range st.Waiters {
		fmt.Fprintf(&b, "|w %q %d %s", q.ID, q.Weight, q.Why.Reason) // not its ETA, which counts down
	}
	if st.Rate != nil { // not its times, which count down as TTLs do
		fmt.Fprintf(&b, "|r %s %v", st.Rate.FleetRate.Text(), st.Rate.PausedMs > 0)
	}
	fmt.Fprintf(&b, "|%s", namestate.RatesText(st.Rates, true))
	return b.String()
}

// timeLayout is the time of a line of watch.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// changeLine is a change in one line, for a pipe:
//
//	TIME NAME limit=L in_use=N holders=2 [ID:WEIGHT ...] waiters=1 [WAITID:WEIGHT:REASON]
//
// followed, when the name has rate state, a pause or a rate in use, by
//
//	rate=EVENTS/PER burst=B next_free=D paused=D
//
// L is the fleet limit, else the processes' own ("5", or
// "5(2procs),4(1proc)" where they disagree), else "-"; the rate likewise
// ("rate=18/1s(2procs),9/1s(1proc) burst=1,1").
func changeLine(name string, st namestate.State, err error, now time.Time) string {
	var b strings.Builder
	b.WriteString(now.Format(timeLayout))
	b.WriteString(" ")
	b.WriteString(quoted(name, ""))
	if err != nil {
		fmt.Fprintf(&b, " error: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return b.String()
	}
	limit := strings.ReplaceAll(limitInUseText(st.FleetLimit, st.Limits, false), " ", "")
	fmt.Fprintf(&b, " limit=%s in_use=%d holders=%d [", limit, st.InUse, len(st.Holders))
	for i, h := range st.Holders {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s:%d", idText(h.ID), h.Weight)
	}
	fmt.Fprintf(&b, "] waiters=%d [", len(st.Waiters))
	for i, q := range st.Waiters {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s:%d:%s", idText(q.ID), q.Weight, cmp.Or(q.Why.Reason, "next"))
	}
	b.WriteString("]")
	if st.Rate != nil || len(st.Rates) > 0 {
		var r namestate.Rate
		if st.Rate != nil {
			r = *st.Rate
		}
		fmt.Fprintf(&b, " rate=%s next_free=%s paused=%s", rateLineText(r.FleetRate, st.Rates), namestate.NextFreeText(r.NextFreeMs, ttlText), namestate.PausedText(r.PausedMs, ttlText))
	}
	b.WriteString("\n")
	return b.String()
}

// rateLineText is the rate a name runs at in a line of watch, in two
// fields: the fleet rate, else the processes' own, rate=100/1m0s
// burst=20, or rate=18/1s(2procs),9/1s(1proc) burst=1,1 where they
// disagree (or rate=-).
func rateLineText(fleet *namestate.RateJSON, rates []namestate.RateInUse) string {
	if r := namestate.EffectiveRate(fleet, rates); r != nil {
		return fmt.Sprintf("%d/%s burst=%d", r.Events, r.Per, r.Burst)
	}
	if len(rates) == 0 {
		return "-"
	}
	per, bursts := make([]string, len(rates)), make([]string, len(rates))
	for i, r := range rates {
		unit := "procs"
		if r.Processes == 1 {
			unit = "proc"
		}
		per[i] = fmt.Sprintf("%d/%s(%d%s)", r.Events, r.Per, r.Processes, unit)
		bursts[i] = strconv.FormatInt(r.Burst, 10)
	}
	return strings.Join(per, ",") + " burst=" + strings.Join(bursts, ",")
}

// quoted quotes s when it would make a line ambiguous: empty, with a
// space, one of the special characters, or anything strconv.Quote
// escapes.
func quoted(s, special string) string {
	if s == "" || strings.ContainsAny(s, " "+special) || strconv.Quote(s) != `"`+s+`"` {
		return strconv.Quote(s)
	}
	return s
}

// idText is an id in a list of a line: ID:WEIGHT in brackets.
func idText(id string) string { return quoted(id, "[]:") }

// drawScreen redraws the view of show in place: from the top left, each
// line cleared to its end, and the rest of the screen cleared below.
func drawScreen(w io.Writer, name string, st namestate.State, err error, now time.Time, interval time.Duration, first bool) error {
	var b bytes.Buffer
	if err != nil {
		fmt.Fprintf(&b, "name:   %s\nerror:  %v\n", name, err)
	} else if werr := writeState(&b, st); werr != nil {
		return werr
	}
	fmt.Fprintf(&b, "\nevery %v, read %s; Ctrl-C ends\n", interval, now.Format("15:04:05"))
	screen := ansiHome
	if first {
		screen += ansiClear
	}
	screen += strings.ReplaceAll(b.String(), "\n", ansiClearEOL+"\n") + ansiClearDown
	_, werr := io.WriteString(w, screen)
	return werr
}

// isTerminal says whether w is a terminal, for watch.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
