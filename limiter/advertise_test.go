package limiter_test

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// An advertised quota sets a learned rate at once, in the rate's own
// unit (600/min is 10/s), within its bounds (above the max: the max), and
// the rate grows no further while every event waits.
func TestAdvertiseSetsTheLearnedRate(t *testing.T) {
	b := singleBackend(t)
	name := uniqueName(b, "adv-set")
	ctx := ctxT(t, 20*time.Second)
	rl := learnedRate(t, b, name, 100, 2)
	insp := inspect.New(clientFor(t, b.client(t)))
	if err := rl.Wait(ctx); err != nil { // the first reservation writes the state
		t.Fatal(err)
	}
	if err := insp.Advertise(ctx, name, limiter.Rate{Events: 600, Per: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if events, l := fleetEvents(t, insp, name); events != 10 || l == nil || l.Value != 10 {
		t.Fatalf("after 600/min advertised the fleet rate is %d/s (%+v), want 10/s", events, l)
	}
	// All used for a second and a half: the slow start would double it.
	end := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(end) {
				if err := rl.Wait(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if events, _ := fleetEvents(t, insp, name); events != 10 {
		t.Errorf("all used under an advertised 10/s the fleet rate grew to %d/s, want 10", events)
	}
	if err := insp.Advertise(ctx, name, limiter.Rate{Events: 500, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	if events, _ := fleetEvents(t, insp, name); events != 100 {
		t.Errorf("after 500/s advertised the fleet rate is %d/s, want the max, 100", events)
	}
}

// A lower advertised rate re-paces what was reserved at the old one, as
// an overload's cut does.
func TestAdvertiseLowerRepacesReservations(t *testing.T) {
	b := singleBackend(t)
	name := uniqueName(b, "adv-repace")
	ctx := ctxT(t, 20*time.Second)
	rl := learnedRate(t, b, name, 50, 50)
	rs, at := reserveAhead(t, rl, 8) // now, +20ms ... +140ms
	awaitPauseListeners(t, b.client(t), 1)
	if err := inspect.New(clientFor(t, b.client(t))).Advertise(ctx, name, limiter.Rate{Events: 25, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	last := len(rs) - 1
	redistest.Eventually(t, 5*time.Second, "the last reservation re-paced", func() bool {
		return rs[last].Time().Sub(at[last]) > 60*time.Millisecond
	})
	if gap := rs[last].Time().Sub(rs[last-1].Time()); gap < 38*time.Millisecond || gap > 42*time.Millisecond {
		t.Errorf("the last two reservations are %v apart after 25/s was advertised, want 40ms", gap)
	}
}

// A higher advertised rate draws in what was reserved at the old one, as
// a learned rise does (TestRiseRepacesReservations): six reserved 500ms
// apart at a start of 2/s go 250ms apart once 4/s is advertised, and one
// reserved after comes after them.
func TestAdvertiseHigherRepacesReservations(t *testing.T) {
	b := singleBackend(t)
	name := uniqueName(b, "adv-rise")
	ctx := ctxT(t, 20*time.Second)
	rl := learnedRate(t, b, name, 100, 2)
	rs, at := reserveAhead(t, rl, 6) // now, +500ms ... +2.5s
	defer func() {
		for _, r := range rs {
			_, _ = r.Cancel(ctx)
		}
	}()
	awaitPauseListeners(t, b.client(t), 1)
	if err := inspect.New(clientFor(t, b.client(t))).Advertise(ctx, name, limiter.Rate{Events: 4, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	last := len(rs) - 1
	redistest.Eventually(t, 5*time.Second, "the last reservation drawn in", func() bool {
		return at[last].Sub(rs[last].Time()) > 900*time.Millisecond
	})
	for i := 2; i < len(rs); i++ {
		if gap := rs[i].Time().Sub(rs[i-1].Time()); gap < 230*time.Millisecond || gap > 270*time.Millisecond {
			t.Errorf("reservations %d and %d are %v apart after 4/s was advertised, want 250ms", i-1, i, gap)
		}
	}
	next, err := rl.ReserveN(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Cancel(ctx)
	if gap := next.Time().Sub(rs[last].Time()); gap < 230*time.Millisecond {
		t.Errorf("the reservation made after the rise is %v after the drawn-in ones, want 250ms", gap)
	}
}

// A fixed rate ignores an advertisement; a bad quota is refused by name.
func TestAdvertiseFixedRateAndBadInput(t *testing.T) {
	b := singleBackend(t)
	name := uniqueName(b, "adv-fixed")
	ctx := ctxT(t, 10*time.Second)
	c := clientFor(t, b.client(t))
	rl, err := c.RateLimit(name, limiter.Rate{Events: 50, Per: time.Second, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := rl.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	insp := inspect.New(c)
	if err := insp.Advertise(ctx, name, limiter.Rate{Events: 10, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	if st, err := insp.Rate(ctx, name); err != nil || st.Fleet.Events != 0 || st.Learned != nil {
		t.Errorf("a fixed rate after an advertisement: %+v, %v; want no fleet rate, nothing learned", st, err)
	}
	for _, q := range []limiter.Rate{{}, {Events: 1}, {Events: -1, Per: time.Second}, {Events: 10, Per: 48 * time.Hour}} {
		var ae *limiter.ArgumentError
		if err := insp.Advertise(ctx, name, q); !errors.As(err, &ae) || ae.Arg[:1] != "q" {
			t.Errorf("Advertise(%+v) = %v, want an *ArgumentError naming q", q, err)
		}
	}
}

// Under an advertised rate an overload cuts the learned limit, not the
// rate, though the rate's next event is not free (without the
// advertisement it would cut the rate too: TestOverloadCutsTheLimitFromItsUse).
func TestOverloadUnderAnAdvertisedRateCutsTheLimit(t *testing.T) {
	b := singleBackend(t)
	name := uniqueName(b, "adv-which")
	ctx := ctxT(t, 20*time.Second)
	c := clientFor(t, b.client(t), limiter.RestartQuarantine(0))
	sem, err := c.Semaphore(name, 10, limiter.Adaptive(1, 50)) // starts at 10, its bound
	if err != nil {
		t.Fatal(err)
	}
	rl, err := c.RateLimit(name, limiter.Rate{Events: 100, Per: time.Second, Burst: 1}, limiter.Adaptive(1, 50))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rl.Allow(ctx); err != nil { // the state
		t.Fatal(err)
	}
	insp := inspect.New(c)
	if err := insp.Advertise(ctx, name, limiter.Rate{Events: 40, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		l, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	for range 3 { // the rate's next event is not free
		if _, err := rl.ReserveN(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := insp.Overload(ctx, name, 0); err != nil {
		t.Fatal(err)
	}
	limit, _ := insp.Limit(ctx, name)
	events, _ := fleetEvents(t, insp, name)
	if limit != 7 || events != 40 {
		t.Errorf("after an overload under an advertised 40/s: limit %d, rate %d/s; want 7 (10 cut) and 40 (left)", limit, events)
	}
}

// ceilingFixture is a learned limit (bound 30, from 10) beside a learned
// rate advertised at 40/s. ago moves its last overload, move and hold d
// back; fill tries 25 acquires past the limit, each d after the last
// overload (each that finds all taken grows it), and returns the limit.
func ceilingFixture(t *testing.T, base string) (insp *inspect.Inspector, sem *limiter.Semaphore, fill func(d time.Duration) int64) {
	b := singleBackend(t)
	name := uniqueName(b, base)
	ctx := ctxT(t, 20*time.Second)
	rdb := b.client(t)
	c := clientFor(t, rdb, limiter.RestartQuarantine(0))
	sem, err := c.Semaphore(name, 30, limiter.Adaptive(1, 10))
	if err != nil {
		t.Fatal(err)
	}
	rl, err := c.RateLimit(name, limiter.Rate{Events: 100, Per: time.Second, Burst: 1}, limiter.Adaptive(1, 50))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rl.Allow(ctx); err != nil {
		t.Fatal(err)
	}
	insp = inspect.New(c)
	if err := insp.Advertise(ctx, name, limiter.Rate{Events: 40, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	l, err := sem.TryAcquire(ctx) // the limit's state
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	state := keysMatching(t, rdb, "*"+name+"}:state")
	if len(state) != 1 {
		t.Fatalf("state keys %v, want one", state)
	}
	ago := func(d time.Duration) {
		f := strings.Fields(rdb.HGet(ctx, state[0], "adapt").Val())
		at := strconv.FormatInt(rdb.Time(ctx).Val().Add(-d).UnixMicro(), 10)
		f[4], f[5], f[6] = at, at, at
		rdb.HSet(ctx, state[0], "adapt", strings.Join(f, " "))
	}
	fill = func(d time.Duration) int64 {
		var got []*limiter.Lease
		for range 25 {
			ago(d)
			if l, err := sem.TryAcquire(ctx); err == nil {
				got = append(got, l)
			}
		}
		for _, l := range got {
			_ = l.Release(ctx)
		}
		limit, _ := insp.Limit(ctx, name)
		return limit
	}
	return insp, sem, fill
}

// overloadHolding overloads name with n of sem's permits held.
func overloadHolding(t *testing.T, insp *inspect.Inspector, sem *limiter.Semaphore, n int64) {
	ctx := ctxT(t, 10*time.Second)
	var held []*limiter.Lease
	for range n {
		l, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	if _, err := insp.Overload(ctx, sem.Name(), 0); err != nil {
		t.Fatal(err)
	}
	for _, l := range held {
		_ = l.Release(ctx)
	}
}

// Under an advertised rate an overload is likely the calls at once': the
// permits held less the refused call's become the learned limit's
// ceiling, which it does not probe past (each probe would be a 429)
// for 30s after the overload, or until the quota changes. 20s after it
// the curve alone would let the limit grow far past it.
func TestAdvertisedRateCeilsTheLearnedLimit(t *testing.T) {
	insp, sem, fill := ceilingFixture(t, "adv-ceil")
	ctx := ctxT(t, 10*time.Second)
	overloadHolding(t, insp, sem, 10) // the upstream took 9
	if limit := fill(20 * time.Second); limit != 9 {
		t.Errorf("all used 20s after an overload with 10 held under an advertised rate: limit %d, want 9", limit)
	}
	if err := insp.Advertise(ctx, sem.Name(), limiter.Rate{Events: 80, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	if limit := fill(20 * time.Second); limit <= 10 {
		t.Errorf("all used after the quota changed: limit %d, want it grown past 10", limit)
	}
}

// Every overload under the advertised rate sets the ceiling from the
// permits held, a permit below the last when they were all the limit's
// (429s of other tenants, the latency signal's): the ceiling lapses 30s
// after the last one, and the limit grows back past where it started.
func TestLearnedLimitCeilingLapses(t *testing.T) {
	insp, sem, fill := ceilingFixture(t, "adv-lapse")
	overloadHolding(t, insp, sem, 10)
	for want := int64(9); want > 6; want-- {
		if limit := fill(20 * time.Second); limit != want {
			t.Fatalf("all used 20s after an overload: limit %d, want the ceiling %d", limit, want)
		}
		overloadHolding(t, insp, sem, want)
	}
	if limit := fill(31 * time.Second); limit <= 10 {
		t.Errorf("all used 31s after the last of 4 overloads under a stable quota: limit %d, want it grown past 10", limit)
	}
}
