package limiter_test

import (
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// Leases nobody refreshes expire and free their permits, and a waiter
// is woken by the earliest expiry (TestCore runs it).
func testExpiry(t *testing.T, b backend) {
	rdb := b.client(t)
	ctx := ctxT(t, 10*time.Second)
	name := uniqueName(b, "expiry")
	crashed, _ := newSemaphore(t, rdb, name, 2, limiter.TTL(150*time.Millisecond), limiter.RefreshInterval(0))
	for range 2 {
		if _, err := crashed.TryAcquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waiter, _ := newSemaphore(t, rdb, name, 2)
	l, err := waiter.Acquire(ctx, limiter.Weight(2)) // woken by the expiry timer
	if err != nil {
		t.Fatal(err)
	}
	hs, _ := holders(ctx, waiter)
	ids := make([]string, 0, len(hs))
	for _, h := range hs {
		ids = append(ids, h.ID)
	}
	sort.Strings(ids)
	if len(ids) != 1 || ids[0] != l.ID() {
		t.Fatalf("holders after expiry: %v", ids)
	}
}

// One script call drops a bounded number of expired leases, however many
// piled up.
func TestSweepIsBounded(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testSweepIsBounded)
}

func testSweepIsBounded(t *testing.T, b backend) {
	rdb := b.client(t)
	ctx := ctxT(t, 60*time.Second)
	// Far more than one call's bound (SWEEP_MAX, 100) and than the
	// 1000 checked below: an unbounded sweep would drop them all.
	const expired = 2500
	leases, state := "redsem:{sweep}:leases", "redsem:{sweep}:state"
	pipe := rdb.Pipeline()
	for i := range expired {
		id := fmt.Sprintf("dead-%d", i)
		pipe.ZAdd(ctx, leases, redis.Z{Score: 1000, Member: id})
		pipe.HSet(ctx, state, ":"+id, "1:1:gone")
	}
	pipe.HSet(ctx, state, "total", expired)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	sem, _ := newSemaphore(t, rdb, "sweep", 3)
	if _, err := sem.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("with %d permits counted in use: %v", expired, err)
	}
	left, err := rdb.ZCount(ctx, leases, "-inf", "2000").Result()
	if err != nil {
		t.Fatal(err)
	}
	if dropped := expired - left; dropped == 0 || dropped > 1000 {
		t.Fatalf("one acquire dropped %d expired leases; want a bounded, non-zero number", dropped)
	}
	// Repeated calls get through the backlog.
	redistest.Eventually(t, 30*time.Second, "the backlog swept", func() bool {
		_, err := sem.TryAcquire(ctx)
		return err == nil
	})
}

// With only the keep-alive member left in the leases set (the state hash
// still counting permits, as after an eviction), the retry hint stays
// sane: no sentinel arithmetic reaches Go.
func TestRetryHintWithOnlyTheKeepAliveMember(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testRetryHintWithOnlyTheKeepAliveMember)
}

func testRetryHintWithOnlyTheKeepAliveMember(t *testing.T, b backend) {
	rdb := b.client(t)
	ctx := ctxT(t, 10*time.Second)
	rdb.ZAdd(ctx, "redsem:{hint}:leases", redis.Z{Score: 1e300, Member: ""})
	rdb.HSet(ctx, "redsem:{hint}:state", "total", 1)
	sem, _ := newMutex(t, rdb, "hint", limiter.TTL(time.Second))
	_, err := sem.TryAcquire(ctx)
	var busy *limiter.BusyError
	if !errors.As(err, &busy) {
		t.Fatalf("TryAcquire: %v", err)
	}
	if busy.RetryIn <= 0 || busy.RetryIn > time.Second {
		t.Fatalf("RetryIn %v, want within (0, TTL]", busy.RetryIn)
	}
}
