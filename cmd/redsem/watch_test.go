package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// TestWatch runs three watches of "jobs" (limit 1) for 1.5 s, piped
// text, piped JSON and a terminal, while a lease is acquired, a request
// queues behind it, the lease is released (the waiter gets its own) and
// that one is released: the piped watches print exactly those five
// states, in order, and nothing in the polls between; the terminal one
// redraws at every poll.
func TestWatch(t *testing.T) {
	f := newFixture(t)
	jobs := f.sem(t, "jobs", 1, limiter.AcquireTimeout(0))
	const interval = 50 * time.Millisecond

	var text, js, screen bytes.Buffer // each written by one watch, read once they return
	var wg sync.WaitGroup
	// Its limit recorded before the watch starts: each line shows it.
	if l, err := jobs.TryAcquire(f.ctx()); err != nil || l.Release(f.ctx()) != nil {
		t.Fatal(err)
	}
	f.recorded(t, "jobs", func(u inspect.InUse) bool { return len(u.Limits) > 0 })
	ctx, cancel := context.WithTimeout(f.ctx(), 1500*time.Millisecond) // after the record's wait
	defer cancel()
	start := time.Now()
	for _, c := range []struct {
		w *bytes.Buffer
		o watchOptions
	}{
		{&text, watchOptions{interval: interval, timeout: time.Second}},
		{&js, watchOptions{json: true, interval: interval, timeout: time.Second}},
		{&screen, watchOptions{tty: true, interval: interval, timeout: time.Second}},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := watch(ctx, c.w, f.cli, "jobs", c.o); err != nil {
				t.Errorf("watch %+v: %v", c.o, err)
			}
		}()
	}

	step := func(at time.Duration) time.Time { time.Sleep(time.Until(start.Add(at))); return time.Now() }
	tAcquire := step(250 * time.Millisecond)
	a := f.hold(t, jobs, "a", 1)
	tQueue := step(500 * time.Millisecond)
	granted, done := make(chan *limiter.Lease, 1), make(chan struct{})
	go func() {
		defer close(done)
		l, err := jobs.Acquire(ctx, limiter.ID("w"))
		if err != nil {
			t.Errorf("waiter: %v", err)
			return
		}
		granted <- l
	}()
	tRelease := step(750 * time.Millisecond)
	if err := a.Release(f.ctx()); err != nil {
		t.Fatal(err)
	}
	w := <-granted
	tReleaseW := step(1000 * time.Millisecond)
	if err := w.Release(f.ctx()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	<-done

	end := time.Now()

	// The changes, each seen after it happened and before the next one.
	// Between the release of a and the grant to the waiter, Redis may be
	// seen with the waiter still queued and nobody holding.
	changes := []struct {
		line          *regexp.Regexp // piped text, after the time
		json          string         // holders and waiters of -json
		after, before time.Time
		optional      bool
	}{
		{regexp.MustCompile(`^jobs limit=1 in_use=0 holders=0 \[\] waiters=0 \[\]$`), "", start, tAcquire, false},
		{regexp.MustCompile(`^jobs limit=1 in_use=1 holders=1 \[a:1\] waiters=0 \[\]$`), "h:a ", tAcquire, tQueue, false},
		{regexp.MustCompile(`^jobs limit=1 in_use=1 holders=1 \[a:1\] waiters=1 \[\S+:1:full\]$`), "h:a w ", tQueue, tRelease, false},
		{regexp.MustCompile(`^jobs limit=1 in_use=0 holders=0 \[\] waiters=1 \[\S+:1:next\]$`), "w ", tRelease, tReleaseW, true},
		{regexp.MustCompile(`^jobs limit=1 in_use=1 holders=1 \[w:1\] waiters=0 \[\]$`), "h:w ", tRelease, tReleaseW, false},
		{regexp.MustCompile(`^jobs limit=1 in_use=0 holders=0 \[\] waiters=0 \[\]$`), "", tReleaseW, end, false},
	}
	// match pairs the printed changes with the expected ones: which
	// expected change each printed one is, or nil when they differ.
	match := func(n int, is func(i, c int) bool) []int {
		var at []int
		c := 0
		for i := range n {
			for c < len(changes) && !is(i, c) && changes[c].optional {
				c++
			}
			if c == len(changes) || !is(i, c) {
				return nil
			}
			at = append(at, c)
			c++
		}
		for ; c < len(changes); c++ {
			if !changes[c].optional {
				return nil
			}
		}
		return at
	}
	inTime := func(c int, tm time.Time) bool {
		return !tm.Before(changes[c].after.Truncate(time.Millisecond)) && !tm.After(changes[c].before)
	}

	// Piped text: a line per change, stamped with the time of the poll.
	got := strings.Split(strings.TrimSuffix(text.String(), "\n"), "\n")
	if match(len(got), func(i, c int) bool {
		stamp, rest, _ := strings.Cut(got[i], " ")
		tm, err := time.Parse(timeLayout, stamp)
		return err == nil && inTime(c, tm) && changes[c].line.MatchString(rest)
	}) == nil {
		t.Errorf("piped watch printed, from %s:\n%s\nwant a line per change, none for polls without one, in time:", start.Format(timeLayout), text.String())
		for _, c := range changes {
			t.Errorf("from %s to %s: %v (optional %v)", c.after.Format(timeLayout), c.before.Format(timeLayout), c.line, c.optional)
		}
	}

	// Piped JSON: an object per change, with show's fields.
	dec := json.NewDecoder(bytes.NewReader(js.Bytes()))
	var events []watchEvent
	for dec.More() {
		var e watchEvent
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("watch -json: %v\n%s", err, js.String())
		}
		events = append(events, e)
	}
	summary := func(e watchEvent) string {
		var b strings.Builder
		for _, h := range e.Holders {
			b.WriteString("h:" + h.ID + " ")
		}
		for range e.Waiters {
			b.WriteString("w ")
		}
		return b.String()
	}
	if strings.Count(js.String(), "\n") != len(events) || match(len(events), func(i, c int) bool {
		e := events[i]
		return summary(e) == changes[c].json && e.Name == "jobs" && inTime(c, e.Time) && e.Holders != nil && e.Waiters != nil
	}) == nil {
		t.Errorf("watch -json printed:\n%s\nwant an object a line per change, none for polls without one, in time", js.String())
	}

	// A terminal: redrawn in place at every poll, not only at changes.
	out := screen.String()
	if !strings.HasPrefix(out, ansiHome+ansiClear+"name:") {
		t.Errorf("the first screen does not start by clearing it: %q", out[:min(len(out), 40)])
	}
	frames := strings.Split(out, ansiHome)[1:]
	if len(frames) < 10 {
		t.Errorf("a terminal watch drew %d screens in 1.5 s at -interval %v, want one per poll", len(frames), interval)
	}
	last := frames[len(frames)-1]
	if !strings.HasSuffix(last, ansiClearEOL+"\n"+ansiClearDown) || !strings.Contains(last, "in use:   0 of 1"+ansiClearEOL+"\n") ||
		!strings.Contains(last, "every 50ms") {
		t.Errorf("last screen:\n%q", last)
	}
	var sawQueue bool
	for _, fr := range frames {
		sawQueue = sawQueue || strings.Contains(fr, "QUEUE  WAIT ID")
	}
	if !sawQueue {
		t.Error("no screen showed the waiter")
	}
}

// The first poll's failure ends watch with it, having printed nothing.
func TestWatchFirstPollFails(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := redistest.Limiter(t, rdb, limiter.Prefix(testPrefix))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := watch(ctx, &out, c, "jobs", watchOptions{interval: 10 * time.Millisecond, timeout: time.Second})
	if err == nil || out.Len() > 0 || ctx.Err() != nil {
		t.Errorf("watch of an unreachable Redis: %v, printed %q", err, out.String())
	}
}
