package limiter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
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
	in := c.Inspector()
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
