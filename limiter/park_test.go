package limiter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// A parked lease keeps its permits with no holder; the first Resume of
// any ticket of its id takes it over with a higher token, a second one and
// the parker's own Release cannot touch it, and unresumed it ends at its
// ttl.
func TestPark(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 30*time.Second)
		name := uniqueName(b, "park")
		first, _ := newSemaphore(t, b.client(t), name, 1)
		l, err := first.TryAcquire(ctx, limiter.ID("task-1"))
		if err != nil {
			t.Fatal(err)
		}
		stale := l.Ticket() // what the retry's headers carry
		// Handed on once, as the scheduler's first run adopts it.
		l.StopRefresh()
		adopted, err := first.Resume(ctx, stale)
		if err != nil {
			t.Fatal(err)
		}
		if err := adopted.Park(ctx, 5*time.Second); err != nil {
			t.Fatal("Park:", err)
		}
		if !errors.Is(adopted.Err(), limiter.ErrNotHeld) || errors.Is(adopted.Err(), limiter.ErrLeaseLost) {
			t.Fatalf("a parked Lease's Err: %v, want ErrNotHeld", adopted.Err())
		}
		if err := adopted.Release(ctx); !errors.Is(err, limiter.ErrNotHeld) {
			t.Fatalf("Release after Park: %v, want ErrNotHeld", err)
		}
		if _, err := first.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
			t.Fatalf("a parked lease keeps its permit: %v, want ErrBusy", err)
		}

		// Another process resumes it by the ticket it knows, whose token is
		// two incarnations old.
		other, _ := newSemaphore(t, b.client(t), name, 1, limiter.TTL(3*time.Second))
		retry, err := other.Resume(ctx, stale)
		if err != nil {
			t.Fatal("Resume of a parked lease:", err)
		}
		if retry.Token() <= adopted.Token() {
			t.Fatalf("resumed token %d, not above %d", retry.Token(), adopted.Token())
		}
		if _, err := other.Resume(ctx, stale); !errors.Is(err, limiter.ErrNotHeld) {
			t.Fatalf("a second Resume of a parked lease: %v, want ErrNotHeld", err)
		}
		// Parking needs the token: the stale Lease cannot park it again.
		if err := l.Park(ctx, time.Second); err == nil {
			t.Fatal("a stale Lease parked a lease it no longer holds")
		}

		// Parked and never resumed, it ends at its ttl.
		if err := retry.Park(ctx, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		redistest.Eventually(t, 5*time.Second, "the parked lease's permit comes back", func() bool {
			n, err := other.Available(ctx)
			return err == nil && n == 1
		})
		if _, err := other.Resume(ctx, stale); !errors.Is(err, limiter.ErrNotHeld) {
			t.Fatalf("Resume after the parked lease ended: %v, want ErrNotHeld", err)
		}
	})
}

// A live lease is never taken by a ticket with another token: only a
// parked one is.
func TestResumeOfALiveLeaseNeedsItsToken(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 10*time.Second)
	mu, _ := newMutex(t, srv.Client(t), "live")
	l, err := mu.TryAcquire(ctx, limiter.ID("x"))
	if err != nil {
		t.Fatal(err)
	}
	stale := l.Ticket()
	stale.Token--
	if _, err := mu.Resume(ctx, stale); !errors.Is(err, limiter.ErrNotHeld) {
		t.Fatalf("Resume with another token: %v, want ErrNotHeld", err)
	}
	var arg *limiter.ArgumentError
	if err := l.Park(ctx, 0); !errors.As(err, &arg) {
		t.Fatalf("Park(0): %v, want an ArgumentError", err)
	}
	if err := l.Park(nil, time.Second); !errors.As(err, &arg) { //nolint:staticcheck // on purpose
		t.Fatalf("Park(nil ctx): %v, want an ArgumentError", err)
	}
	if l.Err() != nil {
		t.Fatalf("bad arguments ended the lease: %v", l.Err())
	}
}

// On a quorum too: parked on every node, resumed by a ticket of its id.
func TestParkOnRedlock(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 20*time.Second)
	sem, err := newRedlockSemaphore(t, q.nodes, "park", 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := sem.TryAcquire(ctx, limiter.ID("task-1"))
	if err != nil {
		t.Fatal(err)
	}
	stale := l.Ticket()
	stale.Token-- // an older incarnation's ticket
	if err := l.Park(ctx, 5*time.Second); err != nil {
		t.Fatal("Park:", err)
	}
	other, _ := newRedlockSemaphore(t, q.nodes, "park", 1)
	if _, err := other.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("a parked lease keeps its permit: %v, want ErrBusy", err)
	}
	resumed, err := other.Resume(ctx, stale)
	if err != nil {
		t.Fatal("Resume of a parked lease:", err)
	}
	if resumed.Token() <= l.Token() {
		t.Fatalf("resumed token %d, not above %d", resumed.Token(), l.Token())
	}
	if err := resumed.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
