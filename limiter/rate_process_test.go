package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// runRateChild waits for events of the rate REDSEM_RATE from
// REDSEM_GOROUTINES goroutines until REDSEM_UNTIL_MS (unix ms). After
// each Wait it appends this machine's clock, in µs, to the list
// events:{name}: the observer's log, which the library does not know of.
// Each entry is "at reserved": when the event went, and the time its
// reservation was given (ReserveN's Time, before a pause moved it).
func runRateChild() int {
	rdb := childClient()
	defer rdb.Close()
	name := os.Getenv("REDSEM_NAME")
	rate, err := limiter.ParseRate(os.Getenv("REDSEM_RATE"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	goroutines, _ := strconv.Atoi(os.Getenv("REDSEM_GOROUTINES"))
	untilMS, _ := strconv.ParseInt(os.Getenv("REDSEM_UNTIL_MS"), 10, 64)
	until := time.UnixMilli(untilMS)
	client, err := limiter.New(rdb, limiter.AcquireTimeout(0), limiter.RestartQuarantine(0))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer client.Close(context.Background())
	rl, err := client.RateLimit(name, rate)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx, cancel := context.WithDeadline(context.Background(), until)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				r, err := rl.ReserveN(ctx, 1)
				var reserved time.Time
				if err == nil {
					reserved = r.Time()
					err = r.Wait(ctx)
				}
				if err != nil {
					if ctx.Err() == nil && !limiterTimedOut(err) {
						errs <- err
						return
					}
					continue
				}
				at := time.Now().UnixMicro()
				entry := fmt.Sprint(at, " ", reserved.UnixMicro())
				if err := rdb.RPush(context.Background(), "events:{"+name+"}", entry).Err(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		fmt.Println("error", err)
		return 1
	}
	return 0
}

// limiterTimedOut: Wait refused a reservation that would end after the
// child's deadline (its last moments).
func limiterTimedOut(err error) bool { return errors.Is(err, limiter.ErrTimeout) }

// startRaters starts n rate children running until until.
func startRaters(t testing.TB, b backend, name, rate string, n, goroutines int, until time.Time) []*exec.Cmd {
	t.Helper()
	var cmds []*exec.Cmd
	for range n {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), b.env...)
		cmd.Env = append(cmd.Env, redistest.ChildEnv+"=rater", "REDSEM_NAME="+name, "REDSEM_RATE="+rate,
			"REDSEM_GOROUTINES="+strconv.Itoa(goroutines), "REDSEM_UNTIL_MS="+strconv.FormatInt(until.UnixMilli(), 10))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		cmds = append(cmds, cmd)
	}
	return cmds
}

// eventTimes waits for the children and returns the observer's log,
// sorted.
func eventTimes(t *testing.T, b backend, name string, cmds []*exec.Cmd) []time.Time {
	t.Helper()
	var out []time.Time
	for _, e := range events(t, b, name, cmds) {
		out = append(out, e.at)
	}
	return out
}

// event is an entry of the observer's log: when the event went, and the
// time its reservation was given.
type event struct{ at, reserved time.Time }

// events waits for the children and returns the observer's log, in the
// order the events went.
func events(t *testing.T, b backend, name string, cmds []*exec.Cmd) []event {
	t.Helper()
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := b.client(t).LRange(context.Background(), "events:{"+name+"}", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []event
	for _, s := range raw {
		at, reserved, _ := strings.Cut(s, " ")
		us, _ := strconv.ParseInt(at, 10, 64)
		rus, _ := strconv.ParseInt(reserved, 10, 64)
		out = append(out, event{at: time.UnixMicro(us), reserved: time.UnixMicro(rus)})
	}
	slices.SortFunc(out, func(a, b event) int { return a.at.Compare(b.at) })
	return out
}

// mostInWindow is the largest number of events in any window [t, t+w).
func mostInWindow(ts []time.Time, w time.Duration) (most int, at time.Time) {
	j := 0
	for i := range ts {
		for j < len(ts) && ts[j].Sub(ts[i]) < w {
			j++
		}
		if j-i > most {
			most, at = j-i, ts[i]
		}
	}
	return most, at
}

// 4 processes x 8 goroutines on "20 per second, burst 5" for 6s: no
// window of 1s holds more than 25 events (GCRA's bound: burst + rate x
// window), and the rate is used, not starved.
func TestRateHoldsAcrossProcesses(t *testing.T) {
	b := singleBackend(t)
	name := "rate-procs"
	const run = 6 * time.Second
	start := time.Now()
	cmds := startRaters(t, b, name, "20/1s burst 5", 4, 8, start.Add(run))
	ts := eventTimes(t, b, name, cmds)
	most, at := mostInWindow(ts, time.Second)
	t.Logf("%d events in %v; at most %d in a 1s window (at +%v)", len(ts), run, most, at.Sub(start).Round(time.Millisecond))
	if most > 25 {
		t.Errorf("%d events in the 1s window from +%v, want at most 25 (burst 5 + 20/s)", most, at.Sub(start).Round(time.Millisecond))
	}
	// The children start within a second or so; from then on 20/s.
	if want := int(20 * (run - 2*time.Second).Seconds()); len(ts) < want {
		t.Errorf("%d events in %v, want at least %d: the rate is not used", len(ts), run, want)
	}
}

// A pause set from this process holds the other processes' waiters, and
// they go at its end, not before.
func TestPauseHoldsEveryProcess(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 30*time.Second)
	name := "rate-paused"
	start := time.Now()
	cmds := startRaters(t, b, name, "100/1s burst 1", 2, 4, start.Add(4*time.Second))
	redistest.Eventually(t, 5*time.Second, "events before the pause", func() bool {
		return b.client(t).LLen(ctx, "events:{"+name+"}").Val() > 10
	})
	insp := inspect.New(clientFor(t, b.client(t)))
	pausedAt := time.Now()
	left, err := insp.Pause(ctx, name, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	end := pausedAt.Add(left)
	ts := eventTimes(t, b, name, cmds)
	// Reservations made before the pause are moved past it, but for the
	// events whose times came as the pause was set (10ms apart here; a
	// loaded machine may log them late).
	settled := pausedAt.Add(100 * time.Millisecond)
	var during, after int
	for _, at := range ts {
		switch {
		case at.After(settled) && at.Before(end.Add(-2*time.Millisecond)):
			during++
			t.Errorf("an event at +%v, during the pause (+%v to +%v)", at.Sub(start).Round(time.Millisecond),
				pausedAt.Sub(start).Round(time.Millisecond), end.Sub(start).Round(time.Millisecond))
		case !at.Before(end.Add(-2 * time.Millisecond)):
			after++
		}
	}
	if after == 0 {
		t.Fatal("no event after the pause ended")
	}
	if first := firstAfter(ts, settled); first.Sub(end) > 200*time.Millisecond {
		t.Errorf("the first event came %v after the pause ended, want at once", first.Sub(end))
	}
}

func firstAfter(ts []time.Time, t0 time.Time) time.Time {
	for _, t := range ts {
		if t.After(t0) {
			return t
		}
	}
	return time.Time{}
}

// A process killed while it waits for its time leaks that time only: the
// next caller goes one interval after it, not later.
func TestKilledRateWaiterLeaksOnlyItsSlot(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 20*time.Second)
	name := "rate-killed"
	rdb := b.client(t)
	rl := newRate(t, b, name, limiter.Rate{Events: 5, Per: time.Second, Burst: 1}) // 200ms apart
	if _, err := rl.ReserveN(ctx, 1); err != nil {
		t.Fatal(err)
	}
	mine, err := rl.ReserveN(ctx, 1) // at +200ms
	if err != nil {
		t.Fatal(err)
	}
	tat := func() string { return rdb.Get(ctx, "redsem:{"+name+"}:rate").Val() }
	before := tat()
	cmds := startRaters(t, b, name, "5/1s", 1, 1, time.Now().Add(time.Minute))
	redistest.Eventually(t, 10*time.Second, "the child reserved its time", func() bool { return tat() != before })
	if err := cmds[0].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmds[0].Wait()
	next, err := rl.ReserveN(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Ours at +200ms, the dead child's at +400ms, this one at +600ms.
	if gap := next.Time().Sub(mine.Time()); gap < 350*time.Millisecond || gap > 450*time.Millisecond {
		t.Errorf("the next event goes %v after ours, want 400ms: the killed waiter's one slot between", gap)
	}
}
