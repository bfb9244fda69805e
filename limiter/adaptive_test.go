package limiter_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// learnedRate is a RateLimit of Events/s (burst 1) whose rate is learned
// from start, on a Client of its own.
func learnedRate(t *testing.T, b backend, name string, events, start int64) *limiter.RateLimit {
	t.Helper()
	rl, err := clientFor(t, b.client(t), limiter.RestartQuarantine(0)).RateLimit(name,
		limiter.Rate{Events: events, Per: time.Second, Burst: 1}, limiter.Adaptive(1, start))
	if err != nil {
		t.Fatal(err)
	}
	return rl
}

// fleetEvents is the events per second the fleet applies to name now.
func fleetEvents(t *testing.T, insp *inspect.Inspector, name string) (int64, *inspect.Learned) {
	t.Helper()
	st, err := insp.Rate(ctxT(t, 5*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	return st.Fleet.Events, st.Learned
}

// A learned rate whose every event waits (the rate is all used) grows by
// an event a second for each event, at most doubling a second, until the
// first overload: from 10/s, 2.2 seconds of full use take it past 20/s
// and below 10 * 2^2.2, far below its bound.
func TestLearnedRateGrowsWhileAllUsed(t *testing.T) {
	// One node: the Cluster runs the same script (the cut's and re-pace's
	// tests cover it there).
	func(t *testing.T, b backend) {
		name := uniqueName(b, "learn-grow")
		rl := learnedRate(t, b, name, 1000, 10)
		insp := inspect.New(clientFor(t, b.client(t)))
		ctx := ctxT(t, 20*time.Second)
		end := time.Now().Add(2200 * time.Millisecond)
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
		events, l := fleetEvents(t, insp, name)
		if events < 20 || events > 46 {
			t.Errorf("after 2.2s all used from 10/s the fleet rate is %d/s, want 20 to 46", events)
		}
		if l == nil || l.Min != 1 || l.Max != 1000 || l.Overload != 0 || l.Pinned {
			t.Errorf("learned state %+v, want bounds 1..1000 and no overload yet", l)
		}
	}(t, singleBackend(t))
}

// Overloads told by several Clients at once (as a fleet's processes hear
// 429s from one episode) cut a learned rate once (the slow start's first:
// to 0.7, its plateau at 0.95); another within the episode's second cuts
// nothing, and one after it cuts again (to 0.85).
func TestOverloadCutsOncePerEpisode(t *testing.T) {
	t.Parallel() // seconds of waiting: beside the other slow ones
	forEachBackend(t, func(t *testing.T, b backend) {
		name := uniqueName(b, "learn-cut")
		ctx := ctxT(t, 20*time.Second)
		rl := learnedRate(t, b, name, 100, 50)
		if _, err := rl.Allow(ctx); err != nil { // the state starts with the first event
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 4 {
			insp := inspect.New(clientFor(t, b.client(t)))
			wg.Go(func() {
				if _, err := insp.Overload(ctx, name, 0); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		insp := inspect.New(clientFor(t, b.client(t)))
		if events, l := fleetEvents(t, insp, name); events != 35 || l == nil || l.Overload != 47.5 {
			t.Fatalf("after 4 overloads of one episode: %d/s (learned %+v), want 35/s (50 cut once by 0.7)", events, l)
		}
		if _, err := insp.Overload(ctx, name, 0); err != nil {
			t.Fatal(err)
		}
		if events, _ := fleetEvents(t, insp, name); events != 35 {
			t.Fatalf("an overload within the episode's second cut to %d/s, want 35 still", events)
		}
		time.Sleep(1100 * time.Millisecond)
		if _, err := insp.Overload(ctx, name, 0); err != nil {
			t.Fatal(err)
		}
		if events, _ := fleetEvents(t, insp, name); events != 29 {
			t.Fatalf("an overload after the episode cut to %d/s, want 29 (35 by 0.85)", events)
		}
	})
}

// An overload that cuts a learned rate re-paces the times another Client
// reserved at the old rate: 20ms apart at 50/s become 28.6ms apart at 35/s.
func TestOverloadRepacesReservations(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		name := uniqueName(b, "learn-repace")
		ctx := ctxT(t, 20*time.Second)
		rdb := b.client(t)
		rl := learnedRate(t, b, name, 50, 50)
		rs, at := reserveAhead(t, rl, 8) // now, +20ms ... +140ms
		awaitPauseListeners(t, rdb, 1)
		if _, err := inspect.New(clientFor(t, b.client(t))).Overload(ctx, name, 0); err != nil {
			t.Fatal(err)
		}
		last := len(rs) - 1
		redistest.Eventually(t, 5*time.Second, "the last reservation re-paced", func() bool {
			return rs[last].Time().Sub(at[last]) > 25*time.Millisecond
		})
		// Those whose time had come before the cut are under way: the
		// pairs both re-paced are 28.6ms apart on the server's clock, so
		// each moved 8.6ms more than the one before (20ms × (50/35 − 1)).
		// Their times as read here carry each reply's clock jitter (20ms
		// apart read as 17 to 23 under load), their moves do not.
		pairs := 0
		for i := 1; i < len(rs); i++ {
			if rs[i-1].Time().Equal(at[i-1]) {
				continue
			}
			pairs++
			more := rs[i].Time().Sub(at[i]) - rs[i-1].Time().Sub(at[i-1])
			if more < 7800*time.Microsecond || more > 9400*time.Microsecond {
				t.Errorf("reservation %d moved %v more than %d after the cut, want 8.6ms (50/s re-paced at 35/s)", i, more, i-1)
			}
		}
		if pairs < 3 {
			t.Errorf("only %d pairs of reservations re-paced, want at least 3", pairs)
		}
		next, err := rl.ReserveN(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if gap := next.Time().Sub(rs[len(rs)-1].Time()); gap < 25*time.Millisecond {
			t.Errorf("the next reservation is %v after the re-paced ones, want about 28.6ms", gap)
		}
	})
}

// SetRate pins a learned rate (an overload leaves it), and clearing it
// clears what was learned: the next event starts learning again.
func TestSetRatePinsALearnedRate(t *testing.T) {
	b := singleBackend(t)
	name := uniqueName(b, "learn-pin")
	ctx := ctxT(t, 20*time.Second)
	rl := learnedRate(t, b, name, 100, 50)
	insp := inspect.New(clientFor(t, b.client(t)))
	if _, err := rl.Allow(ctx); err != nil {
		t.Fatal(err)
	}
	if err := insp.SetRate(ctx, name, limiter.Rate{Events: 30, Per: time.Second, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := insp.Overload(ctx, name, 0); err != nil {
		t.Fatal(err)
	}
	if events, l := fleetEvents(t, insp, name); events != 30 || l == nil || !l.Pinned {
		t.Fatalf("pinned: %d/s, learned %+v; want 30/s pinned", events, l)
	}
	if err := insp.SetRate(ctx, name, limiter.Rate{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rl.Allow(ctx); err != nil {
		t.Fatal(err)
	}
	if events, l := fleetEvents(t, insp, name); events != 50 || l == nil || l.Pinned {
		t.Fatalf("cleared: %d/s, learned %+v; want learning again from 50/s", events, l)
	}
}

func TestAdaptiveBadInput(t *testing.T) {
	b := singleBackend(t)
	c := clientFor(t, b.client(t))
	r := limiter.Rate{Events: 100, Per: time.Second, Burst: 1}
	for _, o := range []limiter.NameOption{limiter.Adaptive(0, 5), limiter.Adaptive(5, 3)} {
		_, err := c.RateLimit("learn-bad", r, o)
		var ae *limiter.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != "Adaptive" {
			t.Errorf("RateLimit with a bad Adaptive: %v, want an *ArgumentError naming Adaptive", err)
		}
	}
	_, err := inspect.New(c).Overload(ctxT(t, 5*time.Second), "learn-bad", -time.Second)
	var ae *limiter.ArgumentError
	if !errors.As(err, &ae) || ae.Arg != "retryAfter" {
		t.Errorf("Overload(-1s): %v, want an *ArgumentError naming retryAfter", err)
	}
}

// learnedSemaphore is a Semaphore of limit (the bound) whose limit is
// learned from start, on a Client of its own.
func learnedSemaphore(t *testing.T, b backend, name string, limit, start int64) (*limiter.Semaphore, *inspect.Inspector) {
	t.Helper()
	c := clientFor(t, b.client(t), limiter.RestartQuarantine(0))
	s, err := c.Semaphore(name, limit, limiter.Adaptive(1, start))
	if err != nil {
		t.Fatal(err)
	}
	return s, inspect.New(c)
}

// A learned limit whose newcomers find every permit taken grows by one
// for each (at most doubling a second), and its holders never exceed the
// bound; an overload
// cuts it (the slow start's first: to 0.7); SetLimit pins it, and
// clearing it starts the learning again.
func TestLearnedLimit(t *testing.T) {
	t.Parallel() // seconds of waiting: beside the other slow ones
	b := singleBackend(t)
	name := uniqueName(b, "learn-limit")
	ctx := ctxT(t, 30*time.Second)
	s, insp := learnedSemaphore(t, b, name, 64, 2)
	var held, peak atomic.Int64
	end := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			for time.Now().Before(end) {
				l, err := s.Acquire(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				n := held.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(20 * time.Millisecond)
				held.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	grown, err := insp.Limit(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if grown < 5 || grown > 8 || peak.Load() > 64 {
		t.Fatalf("12 callers for 2s from a learned limit of 2: limit %d, %d held at once; want it grown to 5..8", grown, peak.Load())
	}
	for range 3 { // one episode, however many tell it
		if _, err := insp.Overload(ctx, name, 0); err != nil {
			t.Fatal(err)
		}
	}
	if cut, _ := insp.Limit(ctx, name); cut != int64(float64(grown)*0.7) && cut != int64(float64(grown)*0.7)+1 {
		t.Fatalf("after one overload episode the limit is %d, want 0.7 of %d", cut, grown)
	}
	if err := insp.SetLimit(ctx, name, 5); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // past the episode
	if _, err := insp.Overload(ctx, name, 0); err != nil {
		t.Fatal(err)
	}
	if pinned, _ := insp.Limit(ctx, name); pinned != 5 {
		t.Fatalf("a pinned limit moved to %d, want 5", pinned)
	}
	if err := insp.SetLimit(ctx, name, 0); err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if again, _ := insp.Limit(ctx, name); again != 2 {
		t.Fatalf("cleared, the limit learns again from %d, want 2 (the start)", again)
	}
}

// An overload in the slow start cuts both learned values (both probe;
// which of the upstream's limits refused cannot be told), the one that
// had room too: a name whose every permit is taken while its rate has
// room has its limit cut from its use (all of it) and its rate as
// itself; one Adaptive serves both, its start taken as each one's bound
// where it is above it.
func TestOverloadCutsWhatWasAllUsed(t *testing.T) {
	b := singleBackend(t)
	name := uniqueName(b, "learn-which")
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
	for range 10 {
		l, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	if _, err := rl.Allow(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the rate's next event is free again
	insp := inspect.New(c)
	if _, err := insp.Overload(ctx, name, 0); err != nil {
		t.Fatal(err)
	}
	limit, _ := insp.Limit(ctx, name)
	events, _ := fleetEvents(t, insp, name)
	if limit != 7 || events != 35 {
		t.Errorf("after an overload with every permit taken and the rate free: limit %d, rate %d/s; want 7 and 35 (both cut by 0.7)", limit, events)
	}
}

// An overload while the rate is all used cuts the learned limit too, from
// the permits held (adapt.lua): a limit of 10 with 4 held was above what
// the upstream took, whichever of its limits refused, and is cut as the
// slow start cuts its use (0.7 of 4: 2), the rate as itself (50 to 35).
func TestOverloadCutsTheLimitFromItsUse(t *testing.T) {
	b := singleBackend(t)
	name := uniqueName(b, "learn-use")
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
	for range 4 {
		l, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	rs, _ := reserveAhead(t, rl, 5) // the rate's next event is 100ms off
	defer func() {
		for _, r := range rs {
			_, _ = r.Cancel(ctx)
		}
	}()
	insp := inspect.New(c)
	if _, err := insp.Overload(ctx, name, 0); err != nil {
		t.Fatal(err)
	}
	limit, _ := insp.Limit(ctx, name)
	events, _ := fleetEvents(t, insp, name)
	if limit != 2 || events != 35 {
		t.Errorf("after an overload with the rate all used and 4 of 10 permits held: limit %d, rate %d/s; want 2 (0.7 of 4) and 35 (0.7 of 50)", limit, events)
	}
}

// A learned rate's rise draws in the times reserved at the old rate
// (reserve.lua): six reserved 500ms apart at a start of 2/s, a
// reservation 600ms later that waits grows the rate to 3/s, and those
// still to come move to 333ms apart from then; the one reserved after the
// rise comes after them.
func TestRiseRepacesReservations(t *testing.T) {
	b := singleBackend(t)
	name := uniqueName(b, "learn-rise")
	ctx := ctxT(t, 20*time.Second)
	rdb := b.client(t)
	rl := learnedRate(t, b, name, 1000, 2)
	rs, at := reserveAhead(t, rl, 6) // now, +500ms ... +2.5s
	defer func() {
		for _, r := range rs {
			_, _ = r.Cancel(ctx)
		}
	}()
	awaitPauseListeners(t, rdb, 1)
	time.Sleep(600 * time.Millisecond)
	other := learnedRate(t, b, name, 1000, 2)
	next, err := other.ReserveN(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Cancel(ctx)
	last := len(rs) - 1
	redistest.Eventually(t, 5*time.Second, "the last reservation drawn in", func() bool {
		return at[last].Sub(rs[last].Time()) > 400*time.Millisecond
	})
	for i := 3; i < len(rs); i++ {
		if gap := rs[i].Time().Sub(rs[i-1].Time()); gap < 300*time.Millisecond || gap > 370*time.Millisecond {
			t.Errorf("reservations %d and %d are %v apart after the rise, want 333ms (3/s)", i-1, i, gap)
		}
	}
	if gap := next.Time().Sub(rs[last].Time()); gap < 300*time.Millisecond {
		t.Errorf("the reservation made at the rise is %v after the drawn-in ones, want about 333ms", gap)
	}
	// A pause then moves the drawn-in ones, the last too (whose Next, moved
	// by its Prev's delta, is above the tat reserve.lua drew in).
	if ok, err := next.Cancel(ctx); !ok || err != nil {
		t.Fatalf("Cancel of the reservation made at the rise: %v, %v; want it given back", ok, err)
	}
	before := rs[last].Time()
	if _, err := inspect.New(clientFor(t, rdb)).Pause(ctx, name, time.Second); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 5*time.Second, "the last drawn-in reservation moved by the pause", func() bool {
		return rs[last].Time().Sub(before) > 900*time.Millisecond
	})
}

// A learned rate does not grow while the name's semaphore has its fleet
// limit all used: the calls at once bind, and reservations that wait do
// so by chance (its callers reserve, then wait for a permit). Once
// permits are free, the same waits grow it.
func TestLearnedRateWaitsWhileTheLimitBinds(t *testing.T) {
	t.Parallel()
	b := singleBackend(t)
	name := uniqueName(b, "learn-binds")
	ctx := ctxT(t, 20*time.Second)
	sem, insp := learnedSemaphore(t, b, name, 8, 2)
	var held []*limiter.Lease
	for range 2 {
		l, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	rl := learnedRate(t, b, name, 1000, 10)
	allUsed := func(d time.Duration) {
		end := time.Now().Add(d)
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
	}
	allUsed(1200 * time.Millisecond)
	if events, _ := fleetEvents(t, insp, name); events != 10 {
		t.Errorf("all used for 1.2s while the learned limit was all held, the rate grew from 10/s to %d/s", events)
	}
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	allUsed(1200 * time.Millisecond)
	if events, _ := fleetEvents(t, insp, name); events <= 10 {
		t.Errorf("all used for 1.2s with the limit free, the rate stayed at %d/s, want it grown", events)
	}
}

// An overload when the rate had room (no reservation waiting: something
// else bound, such as the calls at once) cuts a learned rate from its
// use, the events reserved in the last second, not from itself: a rate
// of 100/s used at 20/s is cut to 0.7 of 20.
func TestOverloadCutsAnUntestedRateFromItsUse(t *testing.T) {
	t.Parallel()
	b := singleBackend(t)
	name := uniqueName(b, "learn-used")
	ctx := ctxT(t, 20*time.Second)
	rl := learnedRate(t, b, name, 1000, 100)
	for end := time.Now().Add(1300 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if err := rl.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	insp := inspect.New(clientFor(t, b.client(t)))
	if _, err := insp.Overload(ctx, name, 0); err != nil {
		t.Fatal(err)
	}
	if events, l := fleetEvents(t, insp, name); events < 9 || events > 15 {
		t.Errorf("an overload at 100/s used at about 20/s cut the rate to %d/s (%+v), want 0.7 of its use, about 14", events, l)
	}
}

// After an overload a learned rate is back near its plateau within
// ADAPT_K (3s: the curve at 1.65s is 0.98 of it, where a K of 7s left it
// at 0.93) and stays under it (flat for 8s more): from 50/s cut to 35,
// plateau 47.5, all used from the hold's end to 1.65s after the cut.
func TestLearnedRateRecoversToItsPlateau(t *testing.T) {
	t.Parallel()
	b := singleBackend(t)
	name := uniqueName(b, "learn-recover")
	ctx := ctxT(t, 20*time.Second)
	rl := learnedRate(t, b, name, 100, 50)
	if _, err := rl.Allow(ctx); err != nil {
		t.Fatal(err)
	}
	insp := inspect.New(clientFor(t, b.client(t)))
	if _, err := insp.Overload(ctx, name, 0); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	time.Sleep(1050 * time.Millisecond) // the episode's hold
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for time.Since(cut) < 1650*time.Millisecond {
				if err := rl.Wait(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if events, l := fleetEvents(t, insp, name); events < 46 || events > 47 {
		t.Errorf("1.65s after a cut from 50/s to 35 (plateau 47.5), all used: %d/s (%+v), want 46-47", events, l)
	}
}
