package limiter_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// pauseListeners counts the subscribers of the channel pauses are told
// on, on every node of rdb.
func pauseListeners(t testing.TB, rdb redis.UniversalClient) int64 {
	t.Helper()
	var (
		mu sync.Mutex
		n  int64
	)
	count := func(ctx context.Context, c *redis.Client) error {
		m, err := c.PubSubNumSub(ctx, limiter.DefaultPrefix+"pause").Result()
		mu.Lock()
		n += m[limiter.DefaultPrefix+"pause"]
		mu.Unlock()
		return err
	}
	ctx := ctxT(t, 5*time.Second)
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachShard(ctx, count)
	case *redis.Ring:
		err = c.ForEachShard(ctx, count)
	case *redis.Client:
		err = count(ctx, c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// awaitPauseListeners gives the Clients of rdb a while to subscribe to
// the pauses' channel (a pause told before would not be heard), n
// subscriptions in all; the test's own checks tell what follows.
func awaitPauseListeners(t testing.TB, rdb redis.UniversalClient, n int64) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); pauseListeners(t, rdb) < n && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}

// reserveAhead reserves n events of rl, the first of which goes at once,
// and returns them with their times as given.
func reserveAhead(t *testing.T, rl *limiter.RateLimit, n int) ([]*limiter.Reservation, []time.Time) {
	t.Helper()
	var rs []*limiter.Reservation
	var at []time.Time
	for range n {
		r, err := rl.ReserveN(ctxT(t, 5*time.Second), 1)
		if err != nil {
			t.Fatal(err)
		}
		rs, at = append(rs, r), append(at, r.Time())
	}
	return rs, at
}

// movedBy waits until every reservation but the first (which went at
// once) is moved, and returns by how much.
func movedBy(t *testing.T, rs []*limiter.Reservation, at []time.Time, d time.Duration) time.Duration {
	t.Helper()
	redistest.Eventually(t, 5*time.Second, "the held reservations moved by the pause", func() bool {
		for i := 1; i < len(rs); i++ {
			if rs[i].Time().Sub(at[i]) < d-50*time.Millisecond {
				return false
			}
		}
		return true
	})
	return rs[1].Time().Sub(at[1])
}

// A pause set by one Client moves the times another Client reserved
// before it: all by what the pause added (its length here), so they keep
// their order and pace and the first goes at its end; the one reserved
// last can still be given back, and those reserved after the pause come
// after them, paced (no burst at the end).
func TestPauseMovesHeldReservations(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 30*time.Second)
		name := uniqueName(b, "rate-moved")
		rdb := b.client(t)
		rl, err := clientFor(t, rdb, limiter.RestartQuarantine(0)).RateLimit(name, limiter.Rate{Events: 10, Per: time.Second, Burst: 1})
		if err != nil {
			t.Fatal(err)
		}
		rs, at := reserveAhead(t, rl, 5) // now, +100ms ... +400ms
		awaitPauseListeners(t, rdb, 1)
		left, err := inspect.New(clientFor(t, b.client(t))).Pause(ctx, name, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		moved := movedBy(t, rs, at, left)
		if moved < left-time.Millisecond || moved > left+time.Millisecond {
			t.Errorf("moved by %v, want by what the pause added (%v)", moved, left)
		}
		if rs[0].Time() != at[0] {
			t.Errorf("the event that went at once moved by %v", rs[0].Time().Sub(at[0]))
		}
		for i := 2; i < len(rs); i++ {
			// The local times carry the replies' jitter.
			if gap := rs[i].Time().Sub(rs[i-1].Time()); gap < 95*time.Millisecond || gap > 105*time.Millisecond {
				t.Errorf("reservations %d and %d are %v apart after the pause, want 100ms as before", i-1, i, gap)
			}
		}
		// Cancel still finds the last one (its tat moved alike): the next
		// caller gets its time.
		if ok, err := rs[4].Cancel(ctx); err != nil || !ok {
			t.Fatalf("Cancel of the last moved reservation: %v, %v; want given back", ok, err)
		}
		next, err := rl.ReserveN(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d := next.Time().Sub(rs[4].Time()); d < -20*time.Millisecond || d > 20*time.Millisecond {
			t.Errorf("the next reservation goes %v after the cancelled one's moved time, want at it", d)
		}
		// Wait sleeps until the moved time.
		if err := rs[1].Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if early := rs[1].Time().Sub(time.Now()); early > 0 {
			t.Errorf("Wait returned %v before the moved time", early)
		}
	})
}

// A pause that moves a held reservation past AcquireTimeout ends its Wait
// at once with a *BusyError (Paused, Rate), and gives the time back; one
// that a pause moved and that was not waited for is not current (Renew).
func TestPausedReservationPastTheBoundIsBusy(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 30*time.Second)
	name := "rate-moved-past"
	rdb := b.client(t)
	rl, err := clientFor(t, rdb, limiter.RestartQuarantine(0)).RateLimit(name,
		limiter.Rate{Events: 10, Per: time.Second, Burst: 1}, limiter.AcquireTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rs, at := reserveAhead(t, rl, 3)
	awaitPauseListeners(t, rdb, 1)
	if _, err := inspect.New(clientFor(t, b.client(t))).Pause(ctx, name, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	movedBy(t, rs, at, 3*time.Second)
	start := time.Now()
	err = rs[2].Wait(ctx)
	var busy *limiter.BusyError
	switch {
	case !errors.As(err, &busy) || !busy.Paused || !busy.Rate || !errors.Is(err, limiter.ErrTimeout):
		t.Fatalf("Wait of a reservation moved past AcquireTimeout: %v, want a *BusyError with Paused and Rate", err)
	case time.Since(start) > 500*time.Millisecond:
		t.Errorf("Wait returned after %v, want at once", time.Since(start))
	case busy.RetryIn < 2*time.Second:
		t.Errorf("RetryIn %v, want the moved wait (about 3.2s)", busy.RetryIn)
	}
	// Given back: the next caller, unbounded, gets its (moved) time.
	unbounded, err := clientFor(t, rdb).RateLimit(name, limiter.Rate{Events: 10, Per: time.Second, Burst: 1}, limiter.AcquireTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	next, err := unbounded.ReserveN(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d := next.Time().Sub(rs[2].Time()); d < -20*time.Millisecond || d > 20*time.Millisecond {
		t.Errorf("the next reservation goes %v after the given back one's moved time, want at it", d)
	}
	if ok, err := rs[1].Renew(ctx); err != nil || ok {
		t.Errorf("Renew of a reservation a pause moved to later: %v, %v; want false", ok, err)
	}
}

// On a Ring the pause of a name is told on its shard: every shard has a
// subscription, so a Client hears the pauses of names on every shard.
func TestRingPauseMovesHeldReservations(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	ring, shards := ringOfTwo(t, "ring-pause-", "rate")
	r := ring()
	holder, pauser := clientFor(t, r, limiter.RestartQuarantine(0)), clientFor(t, ring())
	for _, name := range shards {
		rl, err := holder.RateLimit(name, limiter.Rate{Events: 10, Per: time.Second, Burst: 1})
		if err != nil {
			t.Fatal(err)
		}
		rs, at := reserveAhead(t, rl, 3)
		awaitPauseListeners(t, r, 2)
		left, err := inspect.New(pauser).Pause(ctx, name, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		movedBy(t, rs, at, left)
	}
}

// The fleet: 3 processes × 3 goroutines wait for events of one
// rate ("5 per second": each goroutine holds a reservation up to 1.8s
// ahead); this process pauses the name for 1s, as a 429 would. The
// observer's log shows no event inside the pause (beyond the few ms in
// which an event whose time had come was under way), the events reserved
// into it going after it in the order they were reserved, paced from its
// end.
func TestPauseHoldsReservationsOfEveryProcess(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 30*time.Second)
	name := "rate-held"
	start := time.Now()
	cmds := startRaters(t, b, name, "5/1s burst 1", 3, 3, start.Add(6*time.Second))
	redistest.Eventually(t, 10*time.Second, "events before the pause", func() bool {
		return b.client(t).LLen(ctx, "events:{"+name+"}").Val() >= 5
	})
	pausedAt := time.Now()
	left, err := inspect.New(clientFor(t, b.client(t))).Pause(ctx, name, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	end := pausedAt.Add(left)
	evs := events(t, b, name, cmds)
	const underWay = 25 * time.Millisecond // an event whose time came as the pause was set
	var moved int
	for i, e := range evs {
		if e.at.After(pausedAt.Add(underWay)) && e.at.Before(end.Add(-2*time.Millisecond)) {
			t.Errorf("an event at +%v (reserved for +%v), during the pause (+%v to +%v)", e.at.Sub(start).Round(time.Millisecond),
				e.reserved.Sub(start).Round(time.Millisecond), pausedAt.Sub(start).Round(time.Millisecond), end.Sub(start).Round(time.Millisecond))
		}
		if e.reserved.After(pausedAt.Add(underWay)) && e.reserved.Before(end) {
			moved++
		}
		if i > 0 && e.reserved.Before(evs[i-1].reserved.Add(-2*time.Millisecond)) {
			t.Errorf("the event at +%v was reserved for +%v, before the one that went ahead of it (+%v): out of order",
				e.at.Sub(start).Round(time.Millisecond), e.reserved.Sub(start).Round(time.Millisecond), evs[i-1].reserved.Sub(start).Round(time.Millisecond))
		}
	}
	if moved < 3 {
		t.Fatalf("only %d events were reserved into the pause: the test proves nothing", moved)
	}
	var after []time.Time
	for _, e := range evs {
		if !e.at.Before(end.Add(-2 * time.Millisecond)) {
			after = append(after, e.at)
		}
	}
	if len(after) == 0 {
		t.Fatal("no event after the pause")
	}
	if d := after[0].Sub(end); d > 300*time.Millisecond {
		t.Errorf("the first event after the pause came %v after its end, want within an interval", d)
	}
	if most, at := mostInWindow(after, time.Second); most > 6 {
		t.Errorf("%d events in the 1s from +%v after the pause, want at most 6 (burst 1 + 5/s): a burst", most, at.Sub(start).Round(time.Millisecond))
	}
	t.Logf("%d events; %d reserved into the pause went after it", len(evs), moved)
}

// A pause moves the rate's schedule only for the events still to come:
// when the burst was spent by events already gone (here one at once, of
// a rate of one per 2s), the first event after a pause of 3s goes at its
// end, not an interval later; so after a pause that extends it, and the
// one after that is paced from there. Were some to come, they would go
// first (TestPauseMovesHeldReservations).
func TestPauseWithNothingHeldStartsAtItsEnd(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 10*time.Second)
		name := uniqueName(b, "rate-pause-spent")
		rl := newRate(t, b, name, limiter.Rate{Events: 1, Per: 2 * time.Second, Burst: 1}, limiter.AcquireTimeout(0))
		if r, err := rl.ReserveN(ctx, 1); err != nil || r.Delay() > 0 {
			t.Fatalf("first event: %v, %v; want now", r, err)
		}
		insp := inspect.New(clientFor(t, b.client(t)))
		for _, d := range []time.Duration{3 * time.Second, 4 * time.Second} {
			if _, err := insp.Pause(ctx, name, d); err != nil {
				t.Fatal(err)
			}
		}
		end := time.Now().Add(4 * time.Second)
		r, err := rl.ReserveN(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d := r.Time().Sub(end); d < -50*time.Millisecond || d > 50*time.Millisecond {
			t.Errorf("the first event after the pause goes %v after its end, want at it", d.Round(time.Millisecond))
		}
		r2, err := rl.ReserveN(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if gap := r2.Time().Sub(r.Time()); gap < 1980*time.Millisecond || gap > 2020*time.Millisecond {
			t.Errorf("the second event after the pause goes %v after the first, want 2s", gap)
		}
	})
}
