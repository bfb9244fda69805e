package limiter_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// 10,000 leases of one name held by one Client are kept alive by a few
// script calls per round, not one per lease.
func TestRefreshInBulk(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testRefreshInBulk)
}

func testRefreshInBulk(t *testing.T, b backend) {
	rdb := b.client(t)
	ctx := ctxT(t, 120*time.Second)
	const leases = 10000
	const interval = 2 * time.Second
	sem, _ := newSemaphore(t, rdb, "bulk", leases, limiter.TTL(8*time.Second), limiter.RefreshInterval(interval))
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < leases; i += 16 {
				if _, err := sem.TryAcquire(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	awaitRecorded(t, rdb, "bulk", 1) // the Client's first record of its limit, before the count
	b.reset(t)
	time.Sleep(2 * interval)
	calls := b.calls(t)
	scripts := redistest.Scripts(calls)
	// A few per round (10-15 on a quiet machine); under a loaded suite a
	// bulk call whose reply came after ReadTimeout is sent again, still
	// far from one per lease.
	if scripts > leases/50 {
		t.Fatalf("%d script calls to keep %d leases alive for two rounds; want a few per round", scripts, leases)
	}
	if calls["zadd"] == 0 {
		t.Fatal("no refresh happened at all: the test proves nothing")
	}
	if n, _ := available(ctx, sem); n != 0 {
		t.Fatalf("available %d, want every lease still held", n)
	}
	t.Logf("%d script calls (%v) kept %d leases alive for %v", scripts, calls, leases, 2*interval)
}

// MaxHold caps how long a lease is kept alive: past it the lease lapses
// at its TTL and its holder is told.
func TestMaxHold(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 10*time.Second)
	sem, _ := newMutex(t, srv.Client(t), "maxhold", limiter.TTL(300*time.Millisecond), limiter.MaxHold(500*time.Millisecond))
	l, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case <-l.Context().Done():
	case <-time.After(3 * time.Second):
		t.Fatal("a lease was kept alive past MaxHold")
	}
	if held := time.Since(start); held < 400*time.Millisecond {
		t.Fatalf("the lease ended after %v, before MaxHold", held)
	}
	if !errors.Is(l.Err(), limiter.ErrLeaseLost) {
		t.Fatalf("Err after MaxHold: %v", l.Err())
	}
	redistest.Eventually(t, 2*time.Second, "the permit back", func() bool {
		hs, err := holders(ctx, sem)
		return err == nil && len(hs) == 0
	})
}
