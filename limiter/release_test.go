package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/redsem/redsem/limiter"
)

// Release with a cancelled ctx still gives the permits back.
func TestReleaseWithCancelledContext(t *testing.T) {
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
		if n, err := limiter.Available(ctx, sem); err != nil || n != 2 {
			t.Fatalf("available %d, %v after Release with a cancelled ctx; want 2", n, err)
		}
	})
}
