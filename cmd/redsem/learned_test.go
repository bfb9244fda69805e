package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// show says a learned rate was set to the quota the upstream advertises,
// and -json carries the quota and why the rate last moved.
func TestShowAdvertisedRate(t *testing.T) {
	f := newFixture(t)
	rl, err := f.holder.RateLimit("adv", limiter.Rate{Events: 100, Per: time.Second, Burst: 1}, limiter.Adaptive(1, 5))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rl.Allow(f.ctx()); err != nil {
		t.Fatal(err)
	}
	if err := inspect.New(f.holder).Advertise(f.ctx(), "adv", limiter.Rate{Events: 40, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	out := f.run(t, func(w *bytes.Buffer) error { return show(f.ctx(), w, f.cli, "adv", false) })
	if !strings.Contains(out, "40.0 within 1..100; no overload yet (growing while all used); set to the advertised 40 ") {
		t.Errorf("show adv:\n%s\nwant the rate set to the advertised 40", out)
	}
	js := strings.Join(strings.Fields(f.run(t, func(w *bytes.Buffer) error { return show(f.ctx(), w, f.cli, "adv", true) })), "")
	if !strings.Contains(js, `"advertised":40,"ceiling":0,"last_move":"advertised"`) {
		t.Errorf("show -json adv: %s\nwant advertised 40, last moved by it", js)
	}
}

// show names a learned limit's ceiling (an overload under an advertised
// rate held 10 permits: at most 9) as one, not as an advertised value.
func TestShowLearnedLimitCeiling(t *testing.T) {
	f := newFixture(t)
	sem, err := f.holder.Semaphore("adv", 30, limiter.Adaptive(1, 10))
	if err != nil {
		t.Fatal(err)
	}
	rl, err := f.holder.RateLimit("adv", limiter.Rate{Events: 100, Per: time.Second, Burst: 1}, limiter.Adaptive(1, 5))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rl.Allow(f.ctx()); err != nil {
		t.Fatal(err)
	}
	insp := inspect.New(f.holder)
	if err := insp.Advertise(f.ctx(), "adv", limiter.Rate{Events: 40, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := sem.Acquire(f.ctx()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := insp.Overload(f.ctx(), "adv", 0); err != nil {
		t.Fatal(err)
	}
	out := f.run(t, func(w *bytes.Buffer) error { return show(f.ctx(), w, f.cli, "adv", false) })
	if !strings.Contains(out, "; held at most 9 until 30s after the overload") || strings.Contains(out, "advertised 9") {
		t.Errorf("show adv:\n%s\nwant the limit held at most 9, not an advertised 9", out)
	}
	js := strings.Join(strings.Fields(f.run(t, func(w *bytes.Buffer) error { return show(f.ctx(), w, f.cli, "adv", true) })), "")
	if !strings.Contains(js, `"advertised":0,"ceiling":9`) {
		t.Errorf("show -json adv: %s\nwant the limit's ceiling 9, advertised 0", js)
	}
}

// ls marks a learned limit and a learned rate with their bounds, and a
// pinned one as pinned; limit and rate say they pin a learned value and
// that clearing it starts the learning again.
func TestLearnedLsAndPin(t *testing.T) {
	f := newFixture(t)
	s, err := f.holder.Semaphore("sem", 30, limiter.Adaptive(1, 4))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(f.ctx()); err != nil {
		t.Fatal(err)
	}
	rl, err := f.holder.RateLimit("rl", limiter.Rate{Events: 50, Per: time.Second, Burst: 1}, limiter.Adaptive(2, 5))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rl.Allow(f.ctx()); err != nil {
		t.Fatal(err)
	}
	out := f.run(t, func(w *bytes.Buffer) error { return ls(f.ctx(), w, f.cli, "", false) })
	if !strings.Contains(out, "4 (learned 1..30)") || !strings.Contains(out, "5/1s burst 1 (learned 2..50)") {
		t.Errorf("ls:\n%s\nwant the learned limit 4 (1..30) and rate 5/s (2..50)", out)
	}
	out = f.run(t, func(w *bytes.Buffer) error { return readLimit(f.ctx(), w, f.cli, "sem", false) })
	if want := "sem: limit 4 (fleet, learned 1..30)\n"; out != want {
		t.Errorf("limit sem: %q, want %q", out, want)
	}

	out = f.run(t, func(w *bytes.Buffer) error { return setLimit(f.ctx(), w, f.cli, "sem", 3, false) })
	if !strings.HasPrefix(out, "sem: fleet limit 3 (was 4, learned 1..30): pinned, nothing moves it; `redsem limit sem 0` clears it") {
		t.Errorf("limit sem 3: %q, want it pinned", out)
	}
	out = f.run(t, func(w *bytes.Buffer) error {
		return setRate(f.ctx(), w, f.cli, "rl", limiter.Rate{Events: 7, Per: time.Second, Burst: 1}, false)
	})
	if !strings.HasPrefix(out, "rl: fleet rate 7/1s burst 1 (was 5/1s burst 1, learned 2..50): pinned") {
		t.Errorf("rate rl 7/s: %q, want it pinned", out)
	}
	out = f.run(t, func(w *bytes.Buffer) error { return ls(f.ctx(), w, f.cli, "", false) })
	if !strings.Contains(out, "3 (pinned)") || !strings.Contains(out, "7/1s burst 1 (pinned)") {
		t.Errorf("ls after the pins:\n%s\nwant 3 and 7/s pinned", out)
	}

	out = f.run(t, func(w *bytes.Buffer) error { return setLimit(f.ctx(), w, f.cli, "sem", 0, false) })
	if want := "sem: fleet limit cleared (was 3, pinned): what was learned is forgotten: learning starts again from its start\n"; out != want {
		t.Errorf("limit sem 0: %q, want %q", out, want)
	}
	out = f.run(t, func(w *bytes.Buffer) error { return setRate(f.ctx(), w, f.cli, "rl", limiter.Rate{}, false) })
	if !strings.Contains(out, "(was 7/1s burst 1, pinned): what was learned is forgotten") {
		t.Errorf("rate rl off: %q, want the learning forgotten", out)
	}
}
