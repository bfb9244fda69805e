package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/namestate"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// ownRate is the rate the application's code gives its rate limits in
// these tests: one event an hour, so that anything more proves a fleet
// rate.
var ownRate = limiter.Rate{Events: 1, Per: time.Hour, Burst: 1}

// rateLimit is a rate limit of the holder, the application's view.
func (f *fixture) rateLimit(t *testing.T, name string, r limiter.Rate) *limiter.RateLimit {
	t.Helper()
	rl, err := f.holder.RateLimit(name, r)
	if err != nil {
		t.Fatal(err)
	}
	return rl
}

// allow counts an event on rl and says whether it could go now.
func (f *fixture) allow(t *testing.T, rl *limiter.RateLimit) bool {
	t.Helper()
	ok, err := rl.Allow(f.ctx())
	if err != nil {
		t.Fatalf("allow %s: %v", rl.Name(), err)
	}
	return ok
}

// durationIn says whether the first submatch of re in s is a duration in
// (lo, hi]: the time left of a pause, which counts down.
func durationIn(re *regexp.Regexp, s string, lo, hi time.Duration) bool {
	m := re.FindStringSubmatch(s)
	if m == nil {
		return false
	}
	d, err := time.ParseDuration(m[1])
	return err == nil && d > lo && d <= hi
}

// msIn says whether ms is set and in (lo, hi].
func msIn(ms *int64, lo, hi time.Duration) bool {
	return ms != nil && *ms > lo.Milliseconds() && *ms <= hi.Milliseconds()
}

func TestRate(t *testing.T) {
	f := newFixture(t)
	rl := f.rateLimit(t, "api", ownRate)
	read := func(asJSON bool) string {
		return f.run(t, func(w *bytes.Buffer) error { return readRateCmd(f.ctx(), w, f.cli, "api", asJSON) })
	}
	set := func(r limiter.Rate, asJSON bool) string {
		return f.run(t, func(w *bytes.Buffer) error { return setRate(f.ctx(), w, f.cli, "api", r, asJSON) })
	}
	if out := read(false); out != "api: rate - (no fleet rate: each process uses its own)\n" {
		t.Errorf("rate api without a fleet rate:\n%s", out)
	}

	if out := set(limiter.Rate{Events: 100, Per: time.Minute, Burst: 20}, false); out != "api: fleet rate 100/1m0s burst 20 (was -)\n" {
		t.Errorf("rate api 100/1m 20:\n%s", out)
	}
	// The application's rate limit obeys it: a burst of 20, not its own 1.
	for i := range 20 {
		if !f.allow(t, rl) {
			t.Fatalf("event %d of the fleet rate's burst of 20 was refused", i+1)
		}
	}
	if f.allow(t, rl) {
		t.Error("a 21st event went at once under a burst of 20")
	}
	if out := read(false); out != "api: rate 100/1m0s burst 20 (fleet)\n" {
		t.Errorf("rate api after setting it:\n%s", out)
	}
	var info rateInfo
	out := read(true)
	fleet := &namestate.RateJSON{Events: 100, Per: "1m0s", Burst: 20}
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.Name != "api" || !info.Fleet ||
		!reflect.DeepEqual(info.FleetRate, fleet) || !msIn(info.NextFreeMs, 0, 600*time.Millisecond) || info.PausedMs != 0 {
		t.Errorf("rate -json api (%v), want the fleet rate, the next event in at most 600ms (burst spent), no pause:\n%s", err, out)
	}

	out = f.run(t, func(w *bytes.Buffer) error {
		return setRate(f.ctx(), w, f.cli, "api", limiter.Rate{Events: 60, Per: time.Minute, Burst: 1}, true)
	})
	var r setRateResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || !r.Fleet || !reflect.DeepEqual(r.Previous, fleet) ||
		!reflect.DeepEqual(r.FleetRate, &namestate.RateJSON{Events: 60, Per: "1m0s", Burst: 1}) {
		t.Errorf("rate -json api 60/1m (%v):\n%s", err, out)
	}

	if out := set(limiter.Rate{}, false); out != "api: fleet rate cleared (was 60/1m0s burst 1): each process uses its own rate again\n" {
		t.Errorf("rate api off:\n%s", out)
	}
	if s, err := inspect.New(f.holder).Rate(f.ctx(), "api"); err != nil || s.Fleet != (limiter.Rate{}) {
		t.Errorf("after rate api off: fleet rate %v, %v; want none", s.Fleet, err)
	}
	out = read(true)
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.Fleet || info.FleetRate != nil || !strings.Contains(out, `"fleet_rate": null`) {
		t.Errorf("rate -json api after clearing (%v):\n%s", err, out)
	}

	// A pause shows under the rate.
	if _, err := inspect.New(f.holder).Pause(f.ctx(), "api", time.Minute); err != nil {
		t.Fatal(err)
	}
	out = read(false)
	if got := strings.Split(out, "\n"); len(got) != 3 || !durationIn(regexp.MustCompile(`^api: paused for (\S+)$`), got[1], 59*time.Second, time.Minute) {
		t.Errorf("rate api while paused:\n%s\nwant the rate, then the pause", out)
	}
}

func TestParseRateArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want limiter.Rate
	}{
		{[]string{"100/1m"}, limiter.Rate{Events: 100, Per: time.Minute, Burst: 1}},
		{[]string{"100/1m", "20"}, limiter.Rate{Events: 100, Per: time.Minute, Burst: 20}},
		{[]string{"5/s"}, limiter.Rate{Events: 5, Per: time.Second, Burst: 1}},
		{[]string{"100/1m0s burst 20"}, limiter.Rate{Events: 100, Per: time.Minute, Burst: 20}}, // as rate prints it
		{[]string{"off"}, limiter.Rate{}},
	} {
		if got, err := parseRateArgs(c.args); err != nil || got != c.want {
			t.Errorf("parseRateArgs(%q) = %+v, %v; want %+v", c.args, got, err, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string // in the message: the argument at fault
	}{
		{[]string{"100"}, "RATE"},
		{[]string{"fast"}, "RATE"},
		{[]string{"0/1m"}, "RATE"},
		{[]string{"100/forever"}, "RATE"},
		{[]string{"100/1m", "many"}, "BURST"},
		{[]string{"100/1m", "0"}, "BURST"},
		{[]string{"1/1m", "99999999999999"}, "BURST"},
		{[]string{"100/1m burst 2", "3"}, "BURST"},
		{[]string{"off", "2"}, "BURST"},
	} {
		_, err := parseRateArgs(c.args)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseRateArgs(%q): %v; want a usage error naming %s", c.args, err, c.want)
		}
	}
}
