package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

func TestPause(t *testing.T) {
	f := newFixture(t)
	rl := f.rateLimit(t, "api", limiter.Rate{Events: 100, Per: time.Second, Burst: 10})
	if !f.allow(t, rl) {
		t.Fatal("the first event of a fresh rate limit was refused")
	}
	pauseFor := func(d time.Duration, asJSON bool) string {
		return f.run(t, func(w *bytes.Buffer) error { return pause(f.ctx(), w, f.cli, "api", d, asJSON) })
	}

	if out := pauseFor(30*time.Second, false); out != "api: paused for 30s\n" {
		t.Errorf("pause api 30s:\n%s", out)
	}
	if f.allow(t, rl) { // 9 of its burst of 10 are left
		t.Error("an event went while its name was paused")
	}
	out := pauseFor(10*time.Second, false)
	if !durationIn(regexp.MustCompile(`^api: paused for (\S+): a longer pause stands`), out, 29*time.Second, 30*time.Second) {
		t.Errorf("pause api 10s under a pause of 30s:\n%s", out)
	}

	var r pauseResult
	out = pauseFor(45*time.Second, true)
	if err := json.Unmarshal([]byte(out), &r); err != nil || r != (pauseResult{Name: "api", PausedMs: 45000, AskedMs: 45000}) {
		t.Errorf("pause -json api 45s (%v):\n%s", err, out)
	}
	out = pauseFor(10*time.Second, true)
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.AskedMs != 10000 || !msIn(&r.PausedMs, 40*time.Second, 45*time.Second) {
		t.Errorf("pause -json api 10s under a pause of 45s (%v):\n%s", err, out)
	}
	if s, err := inspect.New(f.holder).Rate(f.ctx(), "api"); err != nil || s.Paused <= 40*time.Second || s.Paused > 45*time.Second {
		t.Errorf("the limiter sees a pause of %v (%v), want the 45s one", s.Paused, err)
	}

	// Above the limiter's longest pause: a usage error (exit 2) naming
	// the argument, and no pause set.
	err := pause(f.ctx(), &bytes.Buffer{}, f.cli, "other", 48*time.Hour, false)
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "DURATION 48h0m0s") {
		t.Errorf("pause other 48h: %v, want a usage error naming DURATION", err)
	}
	if s, err := inspect.New(f.holder).Rate(f.ctx(), "other"); err != nil || s.Paused != 0 {
		t.Errorf("pause other 48h paused it for %v (%v)", s.Paused, err)
	}
}

func TestUnpause(t *testing.T) {
	f := newFixture(t)
	rl := f.rateLimit(t, "api", limiter.Rate{Events: 100, Per: time.Second, Burst: 10})
	if _, err := inspect.New(f.holder).Pause(f.ctx(), "api", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	unpauseIt := func(asJSON bool) string {
		return f.run(t, func(w *bytes.Buffer) error { return unpause(f.ctx(), w, f.cli, "api", asJSON) })
	}
	if out := unpauseIt(false); !durationIn(regexp.MustCompile(`^api: unpaused \((\S+) of its pause were left\)\n$`), out, 29*time.Second, 30*time.Second) {
		t.Errorf("unpause api:\n%s", out)
	}
	if !f.allow(t, rl) {
		t.Error("an event was refused after unpause")
	}
	if out := unpauseIt(false); out != "api: was not paused\n" {
		t.Errorf("unpause api again:\n%s", out)
	}
	var r unpauseResult
	out := unpauseIt(true)
	if err := json.Unmarshal([]byte(out), &r); err != nil || r != (unpauseResult{Name: "api"}) || !strings.Contains(out, `"was_paused_ms": 0`) {
		t.Errorf("unpause -json api (%v):\n%s", err, out)
	}
}
