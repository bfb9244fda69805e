package limiter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// An acquire's reply that comes late or never: a grant answered after
// the lease's local deadline or after AcquireTimeout, and the retry after
// a lost reply, which reclaims the lease that reply was about (and only
// that one).

// An acquire whose reply comes after the lease's local deadline must not
// hand out a lease that is already lost, nor keep refreshing it: the
// permit is given back. The permits were free, only the reply was slow:
// TryAcquire and Acquire ask again and return the lease of that attempt,
// where they returned ErrLeaseLost (a 5ms TTL did so on a loaded machine).
func TestLateReplyGivesThePermitBack(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		testLateReplyGivesThePermitBack(t, b, "try", func(ctx context.Context, s *limiter.Semaphore) (*limiter.Lease, error) {
			return s.TryAcquire(ctx)
		})
		testLateReplyGivesThePermitBack(t, b, "wait", func(ctx context.Context, s *limiter.Semaphore) (*limiter.Lease, error) {
			return s.Acquire(ctx)
		})
	})
}

func testLateReplyGivesThePermitBack(t *testing.T, b backend, name string, acquire func(context.Context, *limiter.Semaphore) (*limiter.Lease, error)) {
	rdb := b.client(t)
	ctx := ctxT(t, 20*time.Second)
	sem, err := newMutex(t, rdb, "late-"+name, limiter.TTL(limiter.MinTTL))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := sem.TryAcquire(ctx); err != nil || l.Release(ctx) != nil { // scripts loaded, connection up
		t.Fatal(err)
	}
	resume := b.pause(t)
	go func() {
		time.Sleep(300 * time.Millisecond)
		resume()
	}()
	l, err := acquire(ctx, sem)
	if err != nil {
		t.Fatalf("%s: a grant whose reply came late: %v, want the lease of the next attempt", name, err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("%s: the lease returned is not held: %v", name, err)
	}
	hs, err := holders(ctx, sem)
	if err != nil || len(hs) != 1 || hs[0].ID != l.ID() {
		t.Fatalf("%s: holders %+v (%v), want only the lease returned, %s: the late grant given back", name, hs, err, l.ID())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b.reset(t)
	redistest.Eventually(t, 5*time.Second, "the permit given back", func() bool {
		hs, err := holders(ctx, sem)
		return err == nil && len(hs) == 0
	})
	time.Sleep(300 * time.Millisecond)
	if calls := b.calls(t); redistest.Scripts(calls) > 20 {
		t.Fatalf("%d script calls in ~0.3s after the late reply: something keeps refreshing", redistest.Scripts(calls))
	}
}

// A retry's reclaim returns only the lease a lost reply was about, never
// one that a Lease of this Client stood for: here the Lease ran out its
// local deadline (Redis keeps it for the drift allowance longer) after a
// cancelled attempt of the same id left the id "unsure". Handing that
// token out again would give its late writes and the new holder's the
// same fencing token.
func TestReclaimNeverReturnsAnEndedLeasesToken(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 10*time.Second)
		mu, _ := newMutex(t, b.client(t), uniqueName(b, "retoken"), limiter.TTL(time.Second),
			limiter.RefreshInterval(0), limiter.ClockDrift(0.3))
		l0, err := mu.TryAcquire(ctx, limiter.ID("x"))
		if err != nil {
			t.Fatal(err)
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := mu.TryAcquire(cancelled, limiter.ID("x")); err == nil {
			t.Fatal("an attempt with a cancelled ctx succeeded")
		}
		<-l0.Context().Done() // lost here at ~0.7s; Redis holds it until 1s
		l2, err := mu.TryAcquire(ctx, limiter.ID("x"))
		if err == nil && l2.Token() == l0.Token() {
			t.Fatalf("a reclaim handed out the token %d of a Lease already lost (%v)", l0.Token(), l0.Err())
		}
		if err != nil && !errors.Is(err, limiter.ErrBusy) {
			t.Fatal(err)
		}
	})
}

// A slow Redis is not a full semaphore: an attempt in flight when
// AcquireTimeout runs out may finish (for up to NodeTimeout more) and its
// grant is used; one that never gets an answer ends in ErrTimeout, not
// ErrBusy with "0 in use".
func TestAcquireTimeoutOnASlowRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 20*time.Second)
	mu, _ := newMutex(t, srv.Client(t), "slow", limiter.AcquireTimeout(100*time.Millisecond), limiter.NodeTimeout(time.Second))
	if l, err := mu.TryAcquire(ctx); err != nil || l.Release(ctx) != nil { // connection up, scripts loaded
		t.Fatal(err)
	}
	srv.Pause(t)
	go func() {
		time.Sleep(300 * time.Millisecond)
		srv.Resume(t)
	}()
	l, err := mu.Acquire(ctx)
	if err != nil {
		t.Fatalf("an attempt answered 200ms after AcquireTimeout (NodeTimeout 1s): %v", err)
	}
	_ = l.Release(ctx)

	srv.Pause(t)
	defer srv.Resume(t)
	_, err = mu.Acquire(ctx)
	if !errors.Is(err, limiter.ErrTimeout) || errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("no answer at all: %v, want ErrTimeout and not ErrBusy", err)
	}
}
