package limiter_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// A limit an Inspector stores binds every Client whatever limit its
// Semaphores were made with; lowering it evicts nobody, raising it wakes a
// waiter at once.
func TestFleetLimit(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 20*time.Second)
		name := uniqueName(b, "fleet")
		c5, c8 := clientFor(t, b.client(t)), clientFor(t, b.client(t))
		ins5, ins8 := inspect.New(c5), inspect.New(c8)
		five, _ := c5.Semaphore(name, 5, limiter.TTL(10*time.Second))
		eight, _ := c8.Semaphore(name, 8, limiter.TTL(10*time.Second))

		if n, err := ins8.Limit(ctx, name); n != 0 || err != nil {
			t.Fatalf("Limit before any SetLimit: %d %v, want 0", n, err)
		}
		if err := ins5.SetLimit(ctx, name, 2); err != nil {
			t.Fatal(err)
		}
		if n, err := ins8.Limit(ctx, name); n != 2 || err != nil {
			t.Fatalf("Limit after SetLimit(2), read by another Client: %d %v", n, err)
		}
		if n, fleet, err := effectiveLimit(ctx, eight); n != 2 || !fleet || err != nil {
			t.Fatalf("the limit-8 Semaphore's effective limit after SetLimit(2): %d %v %v", n, fleet, err)
		}
		a, err := five.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		bl, err := eight.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := eight.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
			t.Fatalf("third lease under a fleet limit of 2 (own limit 8): %v", err)
		}
		var arg *limiter.ArgumentError
		if _, err := eight.TryAcquire(ctx, limiter.Weight(3)); !errors.As(err, &arg) || arg.Arg != "Weight" {
			t.Fatalf("weight 3 above the fleet limit 2: %v, want an ArgumentError naming Weight", err)
		}

		// Lowering: nobody evicted, nobody new until the permits fit.
		if err := ins8.SetLimit(ctx, name, 1); err != nil {
			t.Fatal(err)
		}
		if a.Err() != nil || bl.Err() != nil {
			t.Fatal("lowering the limit ended a lease")
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := five.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
			t.Fatalf("with 1 in use under a limit of 1: %v", err)
		}

		// Raising: a waiter in another Client is woken by SetLimit itself,
		// not by its fallback timer (2s) or its keep-alive (every 1s).
		wokenBy(t, ctx, five, func() error { return ins8.SetLimit(ctx, name, 2) }, "raising the limit")

		// Clearing: each Semaphore's own limit again.
		if err := ins5.SetLimit(ctx, name, 0); err != nil {
			t.Fatal(err)
		}
		if n, err := ins8.Limit(ctx, name); n != 0 || err != nil {
			t.Fatalf("Limit after clearing: %d %v, want 0", n, err)
		}
		if n, fleet, err := effectiveLimit(ctx, eight); n != 8 || fleet || err != nil {
			t.Fatalf("the limit-8 Semaphore's effective limit after clearing: %d %v %v", n, fleet, err)
		}
		if err := ins5.SetLimit(ctx, name, -1); !errors.As(err, &arg) || arg.Arg != "n" {
			t.Fatalf("SetLimit(-1): %v", err)
		}
		_ = bl.Release(ctx)
	})
}

// While a limit is stored the keys do not expire; cleared, they do again.
func TestFleetLimitOutlivesIdleKeys(t *testing.T) {
	b := singleBackend(t)
	rdb := b.client(t)
	ctx := ctxT(t, 10*time.Second)
	sem, _ := newSemaphore(t, rdb, "persist", 3, limiter.TTL(time.Second))
	ins := inspect.New(clientFor(t, rdb))
	l, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	if ttl := rdb.PTTL(ctx, "redsem:{persist}:state").Val(); ttl <= 0 {
		t.Fatalf("state key TTL %v before SetLimit, want one", ttl)
	}
	if err := ins.SetLimit(ctx, "persist", 2); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond) // past the keys' slack, so a grant would extend them
	l, err = sem.TryAcquire(ctx)        // a grant must not set an expiry again
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	if ttl := rdb.PTTL(ctx, "redsem:{persist}:state").Val(); ttl != -1 {
		t.Fatalf("state key TTL %v with a stored limit, want none (-1)", ttl)
	}
	if err := ins.SetLimit(ctx, "persist", 0); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, "redsem:{persist}:state").Val(); ttl <= 0 {
		t.Fatalf("state key TTL %v after clearing, want one", ttl)
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 10*time.Second)
		c := clientFor(t, b.client(t))
		want := []string{"api-a", "api-{b}", "other%"}
		for _, n := range want {
			s, _ := c.Semaphore(n, 2)
			if _, err := s.TryAcquire(ctx); err != nil {
				t.Fatal(err)
			}
		}
		all, err := inspect.New(c).Names(ctx, "")
		if err != nil || !slices.Equal(all, want) {
			t.Fatalf("Names: %v %v, want %v", all, err, want)
		}
		api, err := inspect.New(c).Names(ctx, "api-*")
		if err != nil || !slices.Equal(api, want[:2]) {
			t.Fatalf("Names(api-*): %v %v", api, err)
		}
	})
}

// A Prefix's glob characters match only themselves, and the glob of
// Names selects names as Redis's matcher would select them as they are,
// not as the key spells them (with "%25", "%7B", then "}:state" after).
func TestNamesGlobAndPrefix(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 20*time.Second)
		rdb := b.client(t)
		holding := func(prefix string, names ...string) *limiter.Client {
			c := redistest.Limiter(t, rdb, limiter.Prefix(prefix))
			for _, n := range names {
				s, err := c.Semaphore(n, 1)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.TryAcquire(ctx); err != nil {
					t.Fatal(err)
				}
			}
			return c
		}
		wantNames := func(c *limiter.Client, what, match string, want ...string) {
			t.Helper()
			got, err := inspect.New(c).Names(ctx, match)
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("%s: Names(%q) = %q, %v; want %q", what, match, got, err, want)
			}
		}

		// Each prefix is the other's SCAN pattern, unescaped.
		for _, pair := range [][2]string{{"svc[eu]:", "svce:"}, {"app*", "app2:"}, {`p\`, "p"}, {"q?", "qq"}} {
			own, other := holding(pair[0], "mine"), holding(pair[1], "theirs")
			wantNames(own, "prefix "+pair[0], "", "mine")
			wantNames(other, "prefix "+pair[1], "", "theirs")
		}

		names := []string{"x%", "{", "n", "%7B", `a\b`}
		c := holding("glob:", names...)
		wantNames(c, "all", "", "%7B", `a\b`, "n", "x%", "{")
		wantNames(c, "the 5 of an escaped %", "*5")
		wantNames(c, "one byte, whatever the key makes of it", "?", "n", "{")
		wantNames(c, "a class of a brace", "[{]", "{")
		wantNames(c, "an escape, not the name's escaping", "?7B", "%7B")
		wantNames(c, "a trailing backslash", `n\`)
		wantNames(c, "an unclosed class", "[n", "n")
		wantNames(c, "an escaped backslash", `a\\b`, `a\b`)

		// Whatever the glob, Names selects what Redis's own matcher does
		// when the keys are the names themselves.
		for _, n := range names {
			if err := rdb.Set(ctx, n, "", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for _, glob := range []string{"*", "*5", "?", "??", "[{]", "[^n]", "?7B", `n\`, `*\`, "[n", "[", "[^", "]",
			`[\]]`, "x\\%", "[%-{]", "[{-%]", "*%*", "**{", `a\\b`, `a[\\]b`, "a?b"} {
			var want []string
			for _, k := range keysMatching(t, rdb, glob) {
				if slices.Contains(names, k) {
					want = append(want, k)
				}
			}
			slices.Sort(want)
			wantNames(c, "as the server matches", glob, want...)
		}
	})
}

// Holders lists the leases; Waiters lists the queue in the order it is
// served.
func TestHoldersAndWaiters(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 10*time.Second)
		name := uniqueName(b, "waiters")
		rdb := b.client(t)
		ins := inspect.New(clientFor(t, rdb))
		sem, _ := newSemaphore(t, rdb, name, 3)
		if hs, err := ins.Holders(ctx, name); err != nil || len(hs) != 0 {
			t.Fatalf("Holders of an unused name: %+v %v, want none", hs, err)
		}
		if ws, err := ins.Waiters(ctx, name); err != nil || len(ws) != 0 {
			t.Fatalf("Waiters of an unused name: %+v %v, want none", ws, err)
		}
		held, err := sem.TryAcquire(ctx, limiter.Weight(3))
		if err != nil {
			t.Fatal(err)
		}
		hs, err := ins.Holders(ctx, name)
		if err != nil || len(hs) != 1 {
			t.Fatalf("Holders: %+v %v, want one", hs, err)
		}
		if h := hs[0]; h.ID != held.ID() || h.Weight != 3 || h.Token != held.Token() || h.TTL <= 0 {
			t.Fatalf("Holders: %+v, want the lease %s of weight 3, token %d", h, held.ID(), held.Token())
		}
		for _, w := range []int64{2, 1, 3} {
			go func() {
				if l, err := sem.Acquire(ctx, limiter.Weight(w)); err == nil {
					_ = l.Release(ctx)
				}
			}()
			time.Sleep(100 * time.Millisecond) // in this order
		}
		ws, err := ins.Waiters(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		var weights []int64
		for _, w := range ws {
			weights = append(weights, w.Weight)
			if w.TTL <= 0 || w.ID == "" || w.Limit != 3 {
				t.Fatalf("waiter %+v, want a TTL, an id and its Semaphore's limit 3", w)
			}
		}
		if !slices.Equal(weights, []int64{2, 1, 3}) {
			t.Fatalf("queue weights %v, want [2 1 3]", weights)
		}
		_ = held.Release(ctx)
		redistest.Eventually(t, 5*time.Second, "the queue drained", func() bool {
			ws, err := ins.Waiters(ctx, name)
			return err == nil && len(ws) == 0
		})
	})
}

// A limit lowered below a queued waiter's weight: that waiter learns so
// (an ArgumentError naming Weight) instead of waiting, and it holds up
// nobody meanwhile.
func TestLoweredLimitBelowAQueuedWeight(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 20*time.Second)
		rdb, name := b.client(t), uniqueName(b, "lowered")
		sem, _ := newSemaphore(t, rdb, name, 5, limiter.AcquireTimeout(15*time.Second))
		all, err := sem.TryAcquire(ctx, limiter.Weight(5))
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			l   *limiter.Lease
			err error
			at  time.Duration
		}
		start := time.Now()
		light, heavy := make(chan result, 1), make(chan result, 1)
		go func() { l, err := sem.Acquire(ctx); light <- result{l, err, time.Since(start)} }()
		time.Sleep(100 * time.Millisecond) // light queues first
		go func() { l, err := sem.Acquire(ctx, limiter.Weight(4)); heavy <- result{l, err, time.Since(start)} }()
		time.Sleep(100 * time.Millisecond)
		if err := inspect.New(clientFor(t, rdb)).SetLimit(ctx, name, 2); err != nil {
			t.Fatal(err)
		}
		_ = all.Release(ctx)
		r := <-light
		if r.err != nil {
			t.Fatalf("the light waiter: %v", r.err)
		}
		_ = r.l.Release(ctx)
		h := <-heavy
		var arg *limiter.ArgumentError
		if !errors.As(h.err, &arg) || arg.Arg != "Weight" || h.at > 3*time.Second {
			t.Fatalf("a waiter of weight 4 under a lowered limit of 2: %v after %v, want an ArgumentError for Weight at once", h.err, h.at)
		}
		l, err := sem.TryAcquire(ctx, limiter.Weight(2))
		if err != nil {
			t.Fatalf("the semaphore after the too-heavy waiter left: %v", err)
		}
		_ = l.Release(ctx)
	})
}

// Clearing a fleet limit lets waiters try again under their own limits at
// once, whatever Client's Inspector clears it (one with no Semaphore of
// the name at all).
func TestClearingTheLimitWakesWaiters(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 20*time.Second)
		name := uniqueName(b, "clear")
		three, _ := newSemaphore(t, b.client(t), name, 3)
		operator := inspect.New(clientFor(t, b.client(t)))
		if err := operator.SetLimit(ctx, name, 1); err != nil {
			t.Fatal(err)
		}
		held, err := three.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wokenBy(t, ctx, three, func() error { return operator.SetLimit(ctx, name, 0) }, "clearing the limit (by another Client's Inspector)")
		_ = held.Release(ctx)
	})
}

// wokenBy queues an Acquire on waiter, then runs act, which must grant
// it at once: not by its fallback timer (2s) or its keep-alive (1s).
func wokenBy(t *testing.T, ctx context.Context, waiter *limiter.Semaphore, act func() error, what string) {
	t.Helper()
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctx)
		if err == nil {
			_ = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond) // queued
	start := time.Now()
	if err := act(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 250*time.Millisecond {
			t.Fatalf("the waiter came %v after %s", d, what)
		}
	case <-time.After(time.Second):
		t.Fatalf("%s left the waiter asleep", what)
	}
}
