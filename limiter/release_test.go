package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// Release with a cancelled ctx still gives the permits back.
func TestReleaseWithCancelledContext(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 10*time.Second)
		sem, _ := newSemaphore(t, b.client(t), uniqueName(b, "cancelled"), 2)
		l, err := sem.Acquire(ctx, limiter.Weight(2))
		if err != nil {
			t.Fatal(err)
		}
		done, cancel := context.WithCancel(ctx)
		cancel()
		if err := l.Release(done); err != nil {
			t.Fatal(err)
		}
		if n, err := available(ctx, sem); err != nil || n != 2 {
			t.Fatalf("available %d, %v after Release with a cancelled ctx; want 2", n, err)
		}
	})
}

// A release Redis did not answer is sent again once Redis answers: the
// permits come back then, not a TTL later.
func TestUnansweredReleaseIsSentAgain(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	srv := redistest.StartServer(t)
	px := redistest.StartProxy(t, srv.Addr())
	via := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = via.Close() })
	opts := []limiter.Option{limiter.TTL(30 * time.Second), limiter.ReleaseTimeout(200 * time.Millisecond)}
	sem, err := clientFor(t, via, opts...).Semaphore("resent", 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	px.Blackhole()
	if err := l.Release(ctx); err == nil {
		t.Fatal("a release through a black hole was answered")
	}
	px.Reset() // drops the release held back: only a resend can free the permit

	other, err := clientFor(t, srv.Client(t), opts...).Semaphore("resent", 1)
	if err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l2, err := other.Acquire(wait)
	if err != nil {
		t.Fatalf("the permit did not come back after Redis answered again: %v", err)
	}
	_ = l2.Release(ctx)
}
