package limiter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// The handover: Lease.Ticket in one process, Semaphore.Resume in
// another, takes a held lease over with a new fencing token and the
// adopter's TTL. (A release granting a waiter its lease:
// direct_grant_test.go. StopRefresh and Park: detach_test.go.)

// A ticket passed as text is taken over once, with a newer token; the
// adopted lease outlives the first holder's TTL, and whoever has its
// ticket may release it; a ticket of a lease that expired, or of an older
// incarnation of its id, takes and releases nothing. TestCore runs it.
func testHandover(t *testing.T, b backend) {
	ctx := ctxT(t, 20*time.Second)
	name := uniqueName(b, "handover")
	// Two clients stand for two processes.
	cron, err := newMutex(t, b.client(t), name, limiter.TTL(300*time.Millisecond), limiter.RefreshInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	worker, err := newMutex(t, b.client(t), name, limiter.TTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := cron.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	text := l.Ticket().String()
	l.StopRefresh()
	ticket, err := limiter.ParseTicket(text)
	if err != nil || ticket != l.Ticket() {
		t.Fatalf("ticket round trip: %+v, %v", ticket, err)
	}
	adopted, err := worker.Resume(ctx, ticket)
	if err != nil {
		t.Fatal(err)
	}
	// A transfer: same id, a newer token, so the resource can fence the
	// previous holder.
	if adopted.ID() != l.ID() || adopted.Token() <= l.Token() {
		t.Fatalf("adopted %s/%d, want %s/>%d", adopted.ID(), adopted.Token(), l.ID(), l.Token())
	}
	if _, err := worker.Resume(ctx, ticket); !errors.Is(err, limiter.ErrNotHeld) {
		t.Fatalf("a second Resume of one ticket: %v, want ErrNotHeld", err)
	}
	time.Sleep(500 * time.Millisecond) // past the cron's 300ms TTL
	if _, err := cron.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("after the original TTL the adopted lease must still hold: %v", err)
	}
	if adopted.Err() != nil {
		t.Fatal(adopted.Err())
	}
	// Whoever has the ticket may release by it.
	if err := cron.ReleaseTicket(ctx, adopted.Ticket()); err != nil {
		t.Fatal(err)
	}
	if err := adopted.Release(ctx); !errors.Is(err, limiter.ErrNotHeld) {
		t.Fatalf("release after ReleaseTicket: %v", err)
	}

	// A ticket whose lease expired before pick-up cannot be adopted.
	l2, err := cron.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-l2.Context().Done() // refresh is off: it ends at its TTL
	if !errors.Is(l2.Err(), limiter.ErrLeaseLost) {
		t.Fatalf("expired lease Err: %v", l2.Err())
	}
	time.Sleep(20 * time.Millisecond) // the local deadline is a little early
	if _, err := worker.Resume(ctx, l2.Ticket()); !errors.Is(err, limiter.ErrNotHeld) {
		t.Fatalf("Resume of an expired ticket: want ErrNotHeld, got %v", err)
	}
	if err := worker.ReleaseTicket(ctx, l2.Ticket()); !errors.Is(err, limiter.ErrNotHeld) {
		t.Fatalf("ReleaseTicket of an expired ticket: want ErrNotHeld, got %v", err)
	}
	// A stale ticket never touches a newer lease with the same id.
	l3, err := cron.TryAcquire(ctx, limiter.ID(l2.ID()))
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.ReleaseTicket(ctx, l2.Ticket()); !errors.Is(err, limiter.ErrNotHeld) {
		t.Fatalf("stale ticket released a newer lease: %v", err)
	}
	if err := l3.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Resume applies the adopter's TTL from now, shorter or longer than the
// lease had left (Refresh, by contrast, only ever extends), and the
// holder it was taken from can no longer refresh it. TestCore runs it.
func testResumeAppliesTheAdoptersTTL(t *testing.T, b backend) {
	ctx := ctxT(t, 10*time.Second)
	name := uniqueName(b, "adopterttl")
	long, _ := newMutex(t, b.client(t), name, limiter.TTL(10*time.Second), limiter.RefreshInterval(0))
	short, _ := newMutex(t, b.client(t), name, limiter.TTL(time.Second), limiter.RefreshInterval(0))
	ttl := func() time.Duration {
		t.Helper()
		hs, err := holders(ctx, long)
		if err != nil || len(hs) != 1 {
			t.Fatalf("holders %+v, %v; want the one lease", hs, err)
		}
		return hs[0].TTL
	}
	l, err := long.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if left := ttl(); left < 9*time.Second {
		t.Fatalf("a fresh 10s lease has %v left", left)
	}

	// Shorter: 10s left, adopted with a TTL of 1s.
	adopted, err := short.Resume(ctx, l.Ticket())
	if err != nil {
		t.Fatal(err)
	}
	if left := ttl(); left > time.Second {
		t.Fatalf("Resume with a 1s TTL of a lease with ~10s left: %v left, want the adopter's 1s", left)
	}
	if err := l.Refresh(ctx); !errors.Is(err, limiter.ErrLeaseLost) {
		t.Fatalf("the previous holder's refresh after a handover: %v, want ErrLeaseLost", err)
	}
	if left := ttl(); left > time.Second {
		t.Fatalf("the previous holder's refresh extended the adopted lease to %v", left)
	}

	// Longer: under 1s left, adopted back with a TTL of 10s.
	back, err := long.Resume(ctx, adopted.Ticket())
	if err != nil {
		t.Fatal(err)
	}
	if left := ttl(); left < 9*time.Second {
		t.Fatalf("Resume with a 10s TTL of a lease with under 1s left: %v left, want the adopter's 10s", left)
	}
	if err := adopted.Refresh(ctx); !errors.Is(err, limiter.ErrLeaseLost) {
		t.Fatalf("the previous holder's refresh after a handover: %v, want ErrLeaseLost", err)
	}
	if err := back.Release(ctx); err != nil {
		t.Fatal(err)
	}
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
}
