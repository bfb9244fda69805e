package limiter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// Guards against what an adversarial review found: a cut that re-paces reserved times leaves pause.lua's record of
// the move; the next reservation undoes the move (tat back to before the
// stretch) when before - burst*T <= at with T the NEW (slower) interval,
// although an event reserved at the old rate was still to come. The next
// event is then timed from the unstretched tat, closer to the stretched
// reserved event than the configured rate allows.
func TestCutKeepsTheConfiguredSpacing(t *testing.T) {
	b := singleBackend(t)
	name := uniqueName(b, "review-undo")
	ctx := ctxT(t, 20*time.Second)
	rdb := b.client(t)
	// 10 per 2s, burst 1: T = 200ms, the configured bound; learned from 10.
	rl, err := clientFor(t, rdb, limiter.RestartQuarantine(0)).RateLimit(name,
		limiter.Rate{Events: 10, Per: 2 * time.Second, Burst: 1}, limiter.Adaptive(1, 10))
	if err != nil {
		t.Fatal(err)
	}
	rs, at := reserveAhead(t, rl, 2) // now, +200ms
	awaitPauseListeners(t, rdb, 1)
	time.Sleep(time.Until(at[0].Add(100 * time.Millisecond)))
	// 10 -> 7 (slow start's first cut): scale 10/7, no pause.
	if _, err := inspect.New(clientFor(t, b.client(t))).Overload(ctx, name, 0); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 5*time.Second, "the reservation re-paced", func() bool {
		return rs[1].Time().Sub(at[1]) > 30*time.Millisecond
	})
	next, err := rl.ReserveN(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("times from the first: %v (re-paced from %v), next %v",
		rs[1].Time().Sub(at[0]), at[1].Sub(at[0]), next.Time().Sub(at[0]))
	if gap := next.Time().Sub(rs[1].Time()); gap < 199*time.Millisecond {
		t.Errorf("the next event is %v after the re-paced one: the configured rate (10/2s, burst 1) wants 200ms, the learned one 333ms", gap)
	}
}

// Guards against what an adversarial review found: the learned state, its bounds included, never expires, and the
// first learning Client's bounds stay: after a deploy lowers the Rate
// (100/s to 20/s, the upstream's contract changed), the processes still
// send at the learned 100/s, five times their configured bound, forever.
func TestLearnedRateStaysWithinEachClientsBound(t *testing.T) {
	b := singleBackend(t)
	name := uniqueName(b, "review-bound")
	ctx := ctxT(t, 20*time.Second)
	old, err := clientFor(t, b.client(t), limiter.RestartQuarantine(0)).RateLimit(name,
		limiter.Rate{Events: 100, Per: time.Second, Burst: 1}, limiter.Adaptive(1, 100))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Allow(ctx); err != nil {
		t.Fatal(err)
	}
	// The new deploy: another Client (process) with the lower bound.
	rl, err := redistest.Limiter(t, b.client(t), limiter.RestartQuarantine(0)).RateLimit(name,
		limiter.Rate{Events: 20, Per: time.Second, Burst: 1}, limiter.Adaptive(1, 10))
	if err != nil {
		t.Fatal(err)
	}
	rs, at := reserveAhead(t, rl, 21)
	_ = rs
	if span := at[20].Sub(at[0]); span < 990*time.Millisecond {
		t.Errorf("21 events of a RateLimit of 20/s (burst 1) span %v, want at least 1s", span)
	}
	for _, k := range keysMatching(t, b.client(t), "*"+name+"*") {
		if ttl := b.client(t).PTTL(ctx, k).Val(); ttl < 0 {
			t.Logf("key %s has no expiry (%v)", k, ttl)
		}
	}
}

// Guards against what an adversarial review found: ParsePauseNotice takes the first word of an old-format notice's
// key for the new "xscale" field when it reads "x<number>": a Prefix such
// as "x2 jobs:" (spaces are allowed) makes every pause notice name
// another key, so no reservation is moved and they go inside the pause.
func TestPauseNoticeUnderAPrefixWithSpaces(t *testing.T) {
	b := singleBackend(t)
	rdb := b.client(t)
	ctx := ctxT(t, 20*time.Second)
	c := redistest.Limiter(t, rdb, limiter.Prefix("x2 jobs:"), limiter.RestartQuarantine(0))
	rl, err := c.RateLimit("review-x", limiter.Rate{Events: 10, Per: time.Second, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	rs, at := reserveAhead(t, rl, 3) // now, +100ms, +200ms
	redistest.Eventually(t, 2*time.Second, "the Client listens for pauses under its prefix", func() bool {
		n, _ := rdb.PubSubNumSub(ctx, "x2 jobs:pause").Result()
		return n["x2 jobs:pause"] == 1
	})
	if _, err := inspect.New(c).Pause(ctx, "review-x", time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if moved := rs[2].Time().Sub(at[2]); moved < 500*time.Millisecond {
		t.Errorf("a reservation 200ms ahead moved %v by a pause of 1s: it goes inside the pause", moved)
	}
}

// Guards against what an adversarial review found: a RateLimit that is not learned obeys a learned fleet rate as
// it obeys SetRate's, upwards too: a process configured at 20/s (no
// Adaptive) sends at the 100/s another process's Adaptive learned.
func TestFixedRateNeverFollowsALearnedRateUp(t *testing.T) {
	b := singleBackend(t)
	name := uniqueName(b, "review-fixed")
	ctx := ctxT(t, 20*time.Second)
	learner, err := clientFor(t, b.client(t), limiter.RestartQuarantine(0)).RateLimit(name,
		limiter.Rate{Events: 100, Per: time.Second, Burst: 1}, limiter.Adaptive(1, 100))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := learner.Allow(ctx); err != nil {
		t.Fatal(err)
	}
	fixed, err := redistest.Limiter(t, b.client(t), limiter.RestartQuarantine(0)).RateLimit(name,
		limiter.Rate{Events: 20, Per: time.Second, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, at := reserveAhead(t, fixed, 21)
	if span := at[20].Sub(at[0]); span < 990*time.Millisecond {
		t.Errorf("21 events of a fixed RateLimit of 20/s (burst 1) span %v, want at least 1s", span)
	}
}

// Guards against what an adversarial review found: a learned rate's keys ({name}:rate:adapt and :rate:fleet) are
// written with no expiry by the first reservation: a per-key name (an
// httplimit Key, an asynqmw Key rule) leaves two keys in Redis forever
// for every key ever seen, where a fixed rate's state expires.
func TestLearnedRateKeysExpire(t *testing.T) {
	b := singleBackend(t)
	rdb := b.client(t)
	ctx := ctxT(t, 20*time.Second)
	c := clientFor(t, rdb, limiter.RestartQuarantine(0))
	for range 3 {
		rl, err := c.RateLimit(uniqueName(b, "review-perkey"),
			limiter.Rate{Events: 10, Per: time.Second, Burst: 1}, limiter.Adaptive(1, 5))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rl.Allow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keysMatching(t, rdb, "*review-perkey*") {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl < 0 {
			t.Errorf("key %s never expires (PTTL %v)", k, ttl)
		}
	}
}

// Guards against what an adversarial review found: the episode's hold is the first overload's pause (or a second);
// a later 429 of the same episode that lengthens the pause does not
// lengthen the hold, so a third, heard while the fleet is still paused
// (nothing was sent since the first: it is the same episode's), cuts
// the learned rate again.
func TestOverloadDuringItsPauseCutsOnce(t *testing.T) {
	b := singleBackend(t)
	name := uniqueName(b, "review-episode")
	ctx := ctxT(t, 20*time.Second)
	rl := learnedRate(t, b, name, 100, 50)
	if _, err := rl.Allow(ctx); err != nil {
		t.Fatal(err)
	}
	insp := inspect.New(clientFor(t, b.client(t)))
	for _, d := range []time.Duration{time.Second, 5 * time.Second} {
		if _, err := insp.Overload(ctx, name, d); err != nil {
			t.Fatal(err)
		}
	}
	if events, _ := fleetEvents(t, insp, name); events != 35 {
		t.Fatalf("after the episode's first two 429s: %d/s, want 35 (50 cut once)", events)
	}
	time.Sleep(1200 * time.Millisecond) // past the first pause, within the second
	left, err := insp.Overload(ctx, name, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if events, _ := fleetEvents(t, insp, name); events != 35 {
		t.Errorf("a 429 heard while still paused (%v left) cut again to %d/s, want 35", left, events)
	}
}

// Guards against what an adversarial review found: Adaptive(0, 0) is the zero store.Learn, which validate takes
// for "not learned": a min below 1 accepted with no *ArgumentError, and
// the rate silently fixed.
func TestAdaptiveZeroZeroIsRefused(t *testing.T) {
	b := singleBackend(t)
	c := clientFor(t, b.client(t))
	_, err := c.RateLimit("review-zero", limiter.Rate{Events: 100, Per: time.Second, Burst: 1}, limiter.Adaptive(0, 0))
	var ae *limiter.ArgumentError
	if !errors.As(err, &ae) || ae.Arg != "Adaptive" {
		t.Errorf("RateLimit with Adaptive(0, 0): %v, want an *ArgumentError naming Adaptive", err)
	}
}

// Guards against what an adversarial review found: growth is clocked by reservations that wait, not by events
// made: 200 callers reserving at once (a backlog, 200 handlers) take a
// learned rate from 10/s to 210/s before a tenth of a second of events
// went, where the docs say it doubles per second of events at r.
func TestGrowthIsBoundedByTheClock(t *testing.T) {
	b := singleBackend(t)
	name := uniqueName(b, "review-clock")
	rl := learnedRate(t, b, name, 1000, 10)
	start := time.Now()
	rs, _ := reserveAhead(t, rl, 40) // within reserveAhead's 5s at 10/s
	defer func() {
		for _, r := range rs {
			_, _ = r.Cancel(ctxT(t, 5*time.Second))
		}
	}()
	insp := inspect.New(clientFor(t, b.client(t)))
	events, _ := fleetEvents(t, insp, name)
	if el := time.Since(start); events > 40 {
		t.Errorf("%v after the first event at 10/s (learned), the fleet rate is %d/s: want at most about 20 (doubling per second of events)", el, events)
	}
}
