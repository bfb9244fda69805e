package limiter_test

import (
	"testing"
	"time"

	"github.com/redsem/redsem/limiter"
)

// Only the head of a queue keeps a timer for the leases that expire
// without a release. When the head leaves the queue (granted, or gone) and
// the next waiter does not fit, the next is the new head: it must hear so,
// with the time of the earliest expiry, or an expiry ahead of it goes
// unheard until its keep-alive a second later (QueueTTL/3). With a 50ms
// TTL a waiter gave up after 1s while the leases ahead had expired.
func TestNewHeadHearsOfAnExpiryAheadWithinTheTTL(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const ttl = limiter.MinTTL
		name := uniqueName(b, "newhead")
		ctx := ctxT(t, 10*time.Second)
		// Holders that never refresh: their leases end at the TTL, unreleased.
		crashed, err := clientFor(t, b.client(t), limiter.RefreshInterval(0)).Mutex(name, limiter.TTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		first, err := clientFor(t, b.client(t), limiter.RefreshInterval(0)).Mutex(name, limiter.TTL(ttl), limiter.AcquireTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		second, err := clientFor(t, b.client(t)).Mutex(name, limiter.TTL(ttl), limiter.AcquireTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := crashed.TryAcquire(ctx); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		got := make(chan time.Time, 1)
		go func() {
			// The head: its timer takes the permit as the crashed lease
			// expires, and lets its own lease expire in turn.
			if _, err := first.Acquire(ctx); err != nil {
				t.Error(err)
			}
			got <- time.Now()
		}()
		time.Sleep(10 * time.Millisecond) // first queues ahead
		l, err := second.Acquire(ctx)
		if err != nil {
			t.Fatalf("the waiter behind: %v", err)
		}
		defer l.Release(ctx)
		firstAt := <-got
		waited := time.Since(firstAt)
		t.Logf("first granted %v after the start, second %v after first", firstAt.Sub(start).Round(time.Millisecond), waited.Round(time.Millisecond))
		// first's lease expires a TTL after it was granted; a loaded
		// machine may add some.
		if waited > ttl+250*time.Millisecond {
			t.Errorf("the new head was granted %v after the one ahead, whose lease lived %v: it did not hear of the expiry", waited, ttl)
		}
	})
}

// The same with direct grants (a TTL of QueueTTL or more): the release
// grants the head its lease and the next becomes the head. The expiry
// ahead is seconds off: no notice is published, the new head's
// keep-alive tells it, and its timer takes the permit at the expiry, not
// at the first keep-alive after it (up to QueueTTL/3 late).
func TestNewHeadAfterADirectGrantHearsOfTheExpiry(t *testing.T) {
	b := singleBackend(t)
	const ttl = limiter.QueueTTL
	ctx := ctxT(t, 20*time.Second)
	holder, err := clientFor(t, b.client(t)).Mutex("newhead-direct", limiter.TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	// first's client never refreshes: its directly granted lease ends.
	first, err := clientFor(t, b.client(t), limiter.RefreshInterval(0)).Mutex("newhead-direct", limiter.TTL(ttl), limiter.AcquireTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	second, err := clientFor(t, b.client(t)).Mutex("newhead-direct", limiter.TTL(ttl), limiter.AcquireTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	held, err := holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		if _, err := first.Acquire(ctx); err != nil {
			t.Error(err)
		}
		got <- time.Now()
	}()
	time.Sleep(50 * time.Millisecond)
	done := make(chan time.Time, 1)
	go func() {
		l, err := second.Acquire(ctx)
		if err != nil {
			t.Error(err)
		} else {
			defer l.Release(ctx)
		}
		done <- time.Now()
	}()
	time.Sleep(50 * time.Millisecond)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	firstAt, secondAt := <-got, <-done
	waited := secondAt.Sub(firstAt)
	t.Logf("second granted %v after first", waited.Round(time.Millisecond))
	if waited > ttl+300*time.Millisecond {
		t.Errorf("the new head was granted %v after the one ahead, whose lease lived %v: its timer missed the expiry", waited, ttl)
	}
}
