package main

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/namestate"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// rates sets up rate limits beside semaphores:
//   - api:github, a semaphore (lease x) and a rate limit with the fleet
//     rate 100/1m burst 20, one event spent: two lines of ls;
//   - mail, a rate limit of its own rate, one event spent (so its next
//     free time depends on each process's rate), paused for 30s;
//   - slow, a rate limit with the fleet rate 1/1h, its event spent;
//   - jobs, a semaphore (lease a) paused for 1m: the pause is per name.
func rates(t *testing.T, f *fixture) {
	t.Helper()
	in := inspect.New(f.holder)
	f.hold(t, f.sem(t, "api:github", 10), "x", 1)
	f.hold(t, f.sem(t, "jobs", 5), "a", 1)
	for name, fleet := range map[string]limiter.Rate{
		"api:github": {Events: 100, Per: time.Minute, Burst: 20},
		"mail":       {},
		"slow":       {Events: 1, Per: time.Hour, Burst: 1},
	} {
		if err := in.SetRate(f.ctx(), name, fleet); err != nil {
			t.Fatal(err)
		}
		if !f.allow(t, f.rateLimit(t, name, ownRate)) {
			t.Fatalf("the first event of %s was refused", name)
		}
		f.recorded(t, name, func(u inspect.InUse) bool { return len(u.Rates) > 0 })
	}
	for name, d := range map[string]time.Duration{"mail": 30 * time.Second, "jobs": time.Minute} {
		if _, err := in.Pause(f.ctx(), name, d); err != nil {
			t.Fatal(err)
		}
	}
}

// A duration field that counts down: (lo, hi] when the test reads it.
type countdown struct{ lo, hi time.Duration }

// sameRow compares a row of fields with want, whose entries are a
// field's text or a countdown.
func sameRow(row []string, want []any) bool {
	if len(row) != len(want) {
		return false
	}
	for i, w := range want {
		switch w := w.(type) {
		case string:
			if row[i] != w {
				return false
			}
		case countdown:
			d, err := time.ParseDuration(row[i])
			if err != nil || d <= w.lo || d > w.hi {
				return false
			}
		}
	}
	return true
}

func TestLsRates(t *testing.T) {
	f := newFixture(t)
	rates(t, f)

	out := f.run(t, func(w *bytes.Buffer) error { return ls(f.ctx(), w, f.cli, "", false) })
	want := [][]any{
		{"NAME", "KIND", "LIMIT", "IN", "USE", "HOLDERS", "WAITERS", "NEXT", "FREE", "PAUSED"},
		// The limits and rates in code, as the Clients recorded them.
		{"api:github", "semaphore", "10", "1", "1", "0", "-", "-"},
		{"api:github", "rate", "100/1m0s", "burst", "20", "-", "-", "-", "now", "-"},
		{"jobs", "semaphore", "5", "1", "1", "0", "-", countdown{59 * time.Second, time.Minute}},
		{"mail", "rate", "1/1h0m0s", "burst", "1", "-", "-", "-", "-", countdown{29 * time.Second, 30 * time.Second}},
		{"slow", "rate", "1/1h0m0s", "burst", "1", "-", "-", "-", countdown{59 * time.Minute, time.Hour}, "-"},
	}
	got := lines(out)
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = sameRow(got[i], want[i])
	}
	if !ok {
		t.Errorf("ls:\n%s\nwant rows %v", out, want)
	}

	out = f.run(t, func(w *bytes.Buffer) error { return ls(f.ctx(), w, f.cli, "", true) })
	var entries []namestate.Entry
	if err := json.Unmarshal([]byte(out), &entries); err != nil || len(entries) != 5 {
		t.Fatalf("ls -json (%v):\n%s", err, out)
	}
	api, jobs, mail, slow := entries[1], entries[2], entries[3], entries[4]
	if api.Kind != namestate.KindRate || !reflect.DeepEqual(api.FleetRate, &namestate.RateJSON{Events: 100, Per: "1m0s", Burst: 20}) ||
		api.NextFreeMs == nil || *api.NextFreeMs != 0 || api.PausedMs != 0 || api.FleetLimit != nil {
		t.Errorf("ls -json api:github's rate: %+v", api)
	}
	if jobs.Kind != namestate.KindSemaphore || jobs.FleetRate != nil || jobs.NextFreeMs != nil || !msIn(&jobs.PausedMs, 59*time.Second, time.Minute) {
		t.Errorf("ls -json jobs: %+v, want a semaphore paused for about 1m", jobs)
	}
	if mail.Kind != namestate.KindRate || mail.FleetRate != nil || mail.NextFreeMs != nil || !msIn(&mail.PausedMs, 29*time.Second, 30*time.Second) {
		t.Errorf("ls -json mail: %+v, want no fleet rate, next free unknown (null), paused for about 30s", mail)
	}
	if slow.Kind != namestate.KindRate || !msIn(slow.NextFreeMs, 59*time.Minute, time.Hour) {
		t.Errorf("ls -json slow: %+v, want the next event in about 1h", slow)
	}
	if !strings.Contains(out, `"next_free_ms": null`) || !strings.Contains(out, `"fleet_rate": null`) {
		t.Errorf("ls -json: no fleet rate and an unknown next free time must be null, not left out:\n%s", out)
	}

	// The glob selects rate limits too.
	out = f.run(t, func(w *bytes.Buffer) error { return ls(f.ctx(), w, f.cli, "m*", false) })
	if got := lines(out); len(got) != 2 || got[1][0] != "mail" || got[1][1] != "rate" {
		t.Errorf("ls m*:\n%s", out)
	}
}

// show adds the rate section, after a blank line, to a name with rate
// state or a pause, and leaves it out (null) otherwise.
func TestShowRate(t *testing.T) {
	f := newFixture(t)
	rates(t, f)
	show := func(name string, asJSON bool) string {
		return f.run(t, func(w *bytes.Buffer) error { return show(f.ctx(), w, f.cli, name, asJSON) })
	}
	for _, c := range []struct {
		name    string
		section [][]any // the lines after the semaphore's summary
	}{
		{"api:github", [][]any{
			{},
			{"rate:", "100/1m0s", "burst", "20", "(fleet);", "the", "processes'", "own:", "1/1h0m0s", "burst", "1", "(1", "proc)"},
			{"next", "free:", "now"},
			{"paused", "for:", "-"},
			{}, // the holders follow
		}},
		{"mail", [][]any{
			{},
			{"rate:", "the", "processes'", "own:", "1/1h0m0s", "burst", "1", "(1", "proc)"},
			{"next", "free:", "-", "(by", "each", "process's", "own", "rate)"},
			{"paused", "for:", countdown{29 * time.Second, 30 * time.Second}},
		}},
		{"jobs", [][]any{ // nothing goes before the pause ends
			{},
			{"rate:", "-", "(no", "fleet", "rate:", "each", "process", "uses", "its", "own)"},
			{"next", "free:", countdown{59 * time.Second, time.Minute}},
			{"paused", "for:", countdown{59 * time.Second, time.Minute}},
			{},
		}},
	} {
		out := show(c.name, false)
		got := lines(out)
		const summary = 5 // name, limit, in use, holders, waiters
		ok := len(got) >= summary+len(c.section)
		for i := 0; ok && i < len(c.section); i++ {
			ok = sameRow(got[summary+i], c.section[i])
		}
		if !ok {
			t.Errorf("show %s:\n%s\nwant after its summary %v", c.name, out, c.section)
		}
	}

	var st namestate.State
	out := show("api:github", true)
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Rate == nil ||
		!reflect.DeepEqual(*st.Rate, namestate.Rate{FleetRate: &namestate.RateJSON{Events: 100, Per: "1m0s", Burst: 20}, NextFreeMs: ptr(0)}) || len(st.Holders) != 1 {
		t.Errorf("show -json api:github (%v):\n%s", err, out)
	}
	if out := show("unused", true); !strings.Contains(out, `"rate": null`) {
		t.Errorf("show -json of a name without rate state: rate must be null:\n%s", out)
	}
	if out := show("unused", false); strings.Contains(out, "rate:") {
		t.Errorf("show of a name without rate state has a rate section:\n%s", out)
	}
}

// watch prints a line when the fleet rate is set, when the name is
// paused, and when the rate is cleared: not at every poll while the pause
// counts down.
func TestWatchRate(t *testing.T) {
	f := newFixture(t)
	in := inspect.New(f.holder)
	ctx, cancel := context.WithCancel(f.ctx()) // once the last step is seen
	defer cancel()
	var text, js bytes.Buffer
	var wg sync.WaitGroup
	for _, c := range []struct {
		w *bytes.Buffer
		o watchOptions
	}{
		{&text, watchOptions{interval: 20 * time.Millisecond, timeout: time.Second}},
		{&js, watchOptions{json: true, interval: 20 * time.Millisecond, timeout: time.Second}},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := watch(ctx, c.w, f.cli, "api", c.o); err != nil {
				t.Errorf("watch %+v: %v", c.o, err)
			}
		}()
	}
	for _, step := range []func() error{
		func() error {
			return in.SetRate(f.ctx(), "api", limiter.Rate{Events: 100, Per: time.Minute, Burst: 20})
		},
		func() error { _, err := in.Pause(f.ctx(), "api", time.Minute); return err },
		func() error { return in.SetRate(f.ctx(), "api", limiter.Rate{}) },
	} {
		time.Sleep(200 * time.Millisecond)
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond) // 25 polls: the last step is printed
	cancel()
	wg.Wait()

	const (
		sem    = `^\S+ api limit=- in_use=0 holders=0 \[\] waiters=0 \[\]`
		minute = `(1m0s|5\d(\.\d+)?s)` // the pause, counting down
	)
	want := []*regexp.Regexp{
		regexp.MustCompile(sem + `$`),
		regexp.MustCompile(sem + ` rate=100/1m0s burst=20 next_free=now paused=-$`),
		regexp.MustCompile(sem + ` rate=100/1m0s burst=20 next_free=` + minute + ` paused=` + minute + `$`),
		regexp.MustCompile(sem + ` rate=- next_free=` + minute + ` paused=` + minute + `$`),
	}
	got := strings.Split(strings.TrimSuffix(text.String(), "\n"), "\n")
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = want[i].MatchString(got[i])
	}
	if !ok {
		t.Errorf("piped watch printed:\n%s\nwant a line per change: %v", text.String(), want)
	}

	var events []watchEvent
	for dec := json.NewDecoder(&js); dec.More(); {
		var e watchEvent
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("watch -json: %v\n%s", err, js.String())
		}
		events = append(events, e)
	}
	if len(events) != 4 || events[0].Rate != nil || events[1].Rate == nil || events[1].Rate.FleetRate == nil || events[1].Rate.PausedMs != 0 ||
		events[2].Rate == nil || events[2].Rate.PausedMs == 0 || events[3].Rate == nil || events[3].Rate.FleetRate != nil {
		t.Errorf("watch -json printed %d objects, want 4: none, fleet rate, paused, cleared:\n%s", len(events), js.String())
	}
}

// The times left round up: a pause with 300µs to go is not "-", nor the
// next event "now".
func TestRateViewRoundsUp(t *testing.T) {
	v := namestate.RateOf(inspect.RateState{Fleet: limiter.Rate{Events: 1, Per: time.Second, Burst: 1}, NextFree: 300 * time.Microsecond, Paused: 200 * time.Microsecond, Known: true})
	if v.PausedMs != 1 || v.NextFreeMs == nil || *v.NextFreeMs != 1 {
		t.Errorf("namestate.RateOf: paused %dms, next free %v; want 1ms each", v.PausedMs, v.NextFreeMs)
	}
	if namestate.PausedText(v.PausedMs, ttlText) != "1ms" || namestate.NextFreeText(v.NextFreeMs, ttlText) != "1ms" {
		t.Errorf("paused %q, next free %q; want 1ms each", namestate.PausedText(v.PausedMs, ttlText), namestate.NextFreeText(v.NextFreeMs, ttlText))
	}
}

// show says what a learned rate has learned, within which bounds, and
// when its last overload was, which moved it last; -json carries the
// same.
func TestShowLearnedRate(t *testing.T) {
	f := newFixture(t)
	rl, err := f.holder.RateLimit("learn", limiter.Rate{Events: 100, Per: time.Second, Burst: 1}, limiter.Adaptive(1, 50))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rl.Allow(f.ctx()); err != nil {
		t.Fatal(err)
	}
	if _, err := inspect.New(f.holder).Overload(f.ctx(), "learn", 0); err != nil {
		t.Fatal(err)
	}
	out := f.run(t, func(w *bytes.Buffer) error { return show(f.ctx(), w, f.cli, "learn", false) })
	if !strings.Contains(out, "learned:") || !strings.Contains(out, "35.0 within 1..100; last overload at 47.5") {
		t.Errorf("show learn:\n%s\nwant the learned 35.0 within 1..100 and its last overload at 47.5", out)
	}
	js := f.run(t, func(w *bytes.Buffer) error { return show(f.ctx(), w, f.cli, "learn", true) })
	if !strings.Contains(strings.Join(strings.Fields(js), ""), `"learned":{"min":1,"max":100,"value":35,"last_overload_rate":47.5`) {
		t.Errorf("show -json learn: %s\nwant its learned state", js)
	}
	if !strings.Contains(js, `"last_move": "overload"`) {
		t.Errorf("show -json learn: %s\nwant it last moved by the overload", js)
	}
}
