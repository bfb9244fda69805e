package limiter_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// busyReason is the Reason of err, a *BusyError, or fails t.
func busyReason(t *testing.T, what string, err error) limiter.Reason {
	t.Helper()
	var busy *limiter.BusyError
	if !errors.As(err, &busy) {
		t.Fatalf("%s: %v, want a BusyError", what, err)
	}
	return busy.Reason()
}

// A fleet limit lowered below the limit a process uses, and filled by
// another process, refuses it with "fleet-limit", as Inspector.Why says,
// not "full": under its own limit it would have been granted. Where the
// permits in use fill its own limit too, it is "full".
func TestBusyReasonOfALoweredFleetLimit(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 60*time.Second)
	c := clientFor(t, b.client(t))
	in := inspect.New(c)
	g := newGrants()

	name := uniqueName(b, "busyfleet")
	startWhyChild(t, b, g, name, 5, 2, 0, 0, 0)
	redistest.Eventually(t, 20*time.Second, "2 holders", func() bool {
		hs, _ := in.Holders(ctx, name)
		return len(hs) == 2
	})
	if err := in.SetLimit(ctx, name, 2); err != nil {
		t.Fatal(err)
	}
	sem, err := c.Semaphore(name, 5, limiter.AcquireTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = sem.TryAcquire(ctx)
	if r := busyReason(t, "TryAcquire under a fleet limit 2 of 5", err); r != limiter.ReasonFleetLimit {
		t.Fatalf("TryAcquire of 1 with 2 held under a fleet limit 2 of its own 5: reason %q (%v), want %q", r, err, limiter.ReasonFleetLimit)
	}
	if !strings.Contains(err.Error(), "fleet limit 2") {
		t.Errorf("the error does not name the fleet limit: %v", err)
	}
	_, err = sem.Acquire(ctx)
	if r := busyReason(t, "Acquire under a fleet limit 2 of 5", err); r != limiter.ReasonFleetLimit {
		t.Fatalf("Acquire that timed out under a fleet limit 2 of its own 5: reason %q (%v), want %q", r, err, limiter.ReasonFleetLimit)
	}

	// Its own limit 2 is full too: "full".
	full := uniqueName(b, "busyfull")
	startWhyChild(t, b, g, full, 2, 2, 0, 0, 0)
	redistest.Eventually(t, 20*time.Second, "2 holders", func() bool {
		hs, _ := in.Holders(ctx, full)
		return len(hs) == 2
	})
	if err := in.SetLimit(ctx, full, 1); err != nil {
		t.Fatal(err)
	}
	sem2, err := c.Semaphore(full, 2)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sem2.TryAcquire(ctx)
	if r := busyReason(t, "TryAcquire of a full own limit", err); r != limiter.ReasonFull {
		t.Fatalf("TryAcquire with its own limit 2 held: reason %q (%v), want %q", r, err, limiter.ReasonFull)
	}
}

// A learned limit (Adaptive) below the Semaphore's own, filled by another
// Client, refuses it with "fleet-limit" too: a fleet limit, learned.
func TestBusyReasonOfALearnedLimit(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 30*time.Second)
	name := uniqueName(b, "busylearned")
	holder, err := clientFor(t, b.client(t)).Semaphore(name, 5, limiter.Adaptive(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := holder.TryAcquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	other, err := clientFor(t, b.client(t)).Semaphore(name, 5, limiter.Adaptive(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.TryAcquire(ctx)
	if r := busyReason(t, "TryAcquire under a learned limit 2 of 5", err); r != limiter.ReasonFleetLimit {
		t.Fatalf("TryAcquire with 2 held under a learned limit 2 of its own 5: reason %q (%v), want %q", r, err, limiter.ReasonFleetLimit)
	}
}

// Why judges each waiter by the restart quarantine its own Client
// applies, which its queue record keeps, not by the asking Client's. On a
// restarted Redis, a process that quarantines waits it out: a Client with
// RestartQuarantine(0) is told "quarantine" with its end. A process that
// does not quarantine, waiting for a pause, is told "paused" with the
// pause's end by a Client whose quarantine would last longer.
func TestWhyJudgesEachWaiterByItsOwnQuarantine(t *testing.T) {
	t.Parallel() // seconds of waiting: beside the other slow ones
	srv := redistest.StartServer(t)
	b := backend{kind: "single", env: []string{"REDSEM_TEST_ADDRS=" + srv.Addr()}}
	ctx := ctxT(t, 60*time.Second)
	qName, pName := uniqueName(b, "ownq"), uniqueName(b, "ownp")
	const q, pause = 8 * time.Second, 3 * time.Second
	noQ := inspect.New(clientFor(t, srv.Client(t), limiter.RestartQuarantine(0)))
	longQ := inspect.New(clientFor(t, srv.Client(t), limiter.RestartQuarantine(3*q)))
	// The names had state before the restart, which forgot it.
	for _, name := range []string{qName, pName} {
		if _, err := noQ.Pause(ctx, name, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	srv.Restart(t)
	if _, err := noQ.Pause(ctx, pName, pause); err != nil {
		t.Fatal(err)
	}
	g := newGrants()
	startWhyChild(t, b, g, qName, 1, 1, time.Hour, q, 0)
	startWhyChild(t, b, g, pName, 1, 1, time.Hour, 0, 0)

	w := waitersOf(t, noQ, qName, 1)[0]
	read := time.Now()
	if w.Why.Reason != limiter.ReasonQuarantine || w.Why.Estimated || w.Why.ETA <= 0 || w.Why.ETA > q {
		t.Fatalf("a waiter whose Client quarantines %v, asked by one that does not: %+v, want quarantine with an exact ETA within %v", q, w.Why, q)
	}
	if one, err := noQ.Why(ctx, qName, w.ID); err != nil || one.Reason != limiter.ReasonQuarantine {
		t.Fatalf("Why(%s) by a Client without quarantine: %+v %v", w.ID, one, err)
	}

	p := waitersOf(t, longQ, pName, 1)[0]
	if p.Why.Reason != limiter.ReasonPaused || p.Why.Estimated || p.Why.ETA <= 0 || p.Why.ETA > pause {
		t.Fatalf("a paused waiter whose Client does not quarantine, asked by one that quarantines %v: %+v, want paused with an exact ETA within %v", 3*q, p.Why, pause)
	}
	if one, err := longQ.Why(ctx, pName, p.ID); err != nil || one.Reason != limiter.ReasonPaused {
		t.Fatalf("Why(%s) by a Client with a quarantine: %+v %v", p.ID, one, err)
	}

	redistest.Eventually(t, 15*time.Second, "the quarantined waiter granted", func() bool { _, ok := g.get(w.ID); return ok })
	at, _ := g.get(w.ID)
	if err := at.Sub(read.Add(w.Why.ETA)); err < -50*time.Millisecond || err > 500*time.Millisecond {
		t.Fatalf("the quarantined waiter was granted %v from its ETA", err)
	}
}
