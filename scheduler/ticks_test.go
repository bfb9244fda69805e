package scheduler_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redsem/redsem/scheduler"
)

// A job every second whose handler takes 2.5s: ticks are skipped while a
// run holds the lock, and runs never overlap.
func TestCronSkipsWhileHeld(t *testing.T) {
	e := newEnv(t)
	var running, overlaps, runs atomic.Int64
	e.worker(t, func(ctx context.Context, _ *asynq.Task) error {
		if running.Add(1) > 1 {
			overlaps.Add(1)
		}
		runs.Add(1)
		time.Sleep(2500 * time.Millisecond)
		running.Add(-1)
		return nil
	})
	s, _ := scheduler.New(e.lc, e.client, scheduler.Metrics(e.metrics))
	if err := s.Register(scheduler.Job{Name: "tick", Spec: "* * * * * *", TaskType: "tick", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	s.Start()
	time.Sleep(6 * time.Second)
	<-s.Stop().Done()
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping runs", overlaps.Load())
	}
	if e.metrics.Count("tick", scheduler.EventSkippedBusy) < 2 || runs.Load() < 1 {
		t.Fatalf("skipped %v ticks, %d runs", e.metrics.Count("tick", scheduler.EventSkippedBusy), runs.Load())
	}
}

// Two schedulers of one job, fast runs, the second started late: each
// tick runs once, even though a run finishes (and frees the lock) before
// the other scheduler's copy of the tick arrives; and ticks fall at the
// same instants in both, for cron specs and for "@every" (on even seconds
// for a 2s period, however far apart the schedulers started).
func TestTwoSchedulersOneRunPerTick(t *testing.T) {
	for _, c := range []struct {
		spec   string
		period int64 // seconds: every tick falls on a multiple
		lag    time.Duration
	}{
		{"* * * * * *", 1, 300 * time.Millisecond},
		{"@every 2s", 2, time.Second},
		{"*/2 * * * * *", 2, time.Second},
	} {
		t.Run(c.spec, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			runs := e.countRuns(t)
			stop := e.schedulers(t, scheduler.Job{Name: "tick", Spec: c.spec, TaskType: "tick", TTL: 10 * time.Second}, c.lag)
			time.Sleep(4500 * time.Millisecond)
			stop()
			time.Sleep(500 * time.Millisecond)
			seen := runs()
			if len(seen) < 2 {
				t.Fatalf("only %d ticks ran", len(seen))
			}
			for id, n := range seen {
				sec, _ := strconv.ParseInt(id[strings.LastIndexByte(id, ':')+1:], 10, 64)
				if n != 1 || sec%c.period != 0 {
					t.Fatalf("tick %s ran %d times; ticks %v: want each once, every %ds", id, n, seen, c.period)
				}
			}
		})
	}
}
