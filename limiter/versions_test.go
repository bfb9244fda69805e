package limiter_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// A queue entry whose record this version cannot read (an older one's
// "weight:expiry:ttl:channel") is dropped as dead by the walk, as before:
// it must not make the release, the next acquire or the Inspector fail.
func TestWaiterRecordOfAnotherVersionIsDropped(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	m, _ := newMutex(t, rdb, "versions")
	l, err := m.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exp := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)
	rdb.HSet(ctx, keyOf("versions", "state"), "?old", "1:"+exp+":3000:redsem:wake:oldclient", "seq", "7")
	rdb.ZAdd(ctx, queueKey("versions"), redis.Z{Score: 7, Member: "old"})
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with another version's waiter queued: %v", err)
	}
	if _, err := inspect.New(clientFor(t, rdb)).Waiters(ctx, "versions"); err != nil {
		t.Errorf("Inspector.Waiters: %v", err)
	}
	if _, err := m.TryAcquire(ctx); err != nil {
		t.Errorf("TryAcquire after the release: %v", err)
	}
}

// A queue entry of the previous version, whose record keeps no restart
// quarantine ("weight:expiry:ttl:limit:channel"), is still a waiter: the
// Inspector lists it, and Why judges it by the asking Client's
// quarantine.
func TestWaiterRecordWithoutQuarantineIsRead(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	m, _ := newMutex(t, rdb, "prevversion")
	if _, err := m.TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	exp := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)
	rdb.HSet(ctx, keyOf("prevversion", "state"), "?prev", "1:"+exp+":0:1:redsem:wake:prevclient", "seq", "7")
	rdb.ZAdd(ctx, queueKey("prevversion"), redis.Z{Score: 7, Member: "prev"})
	ws, err := inspect.New(clientFor(t, rdb)).Waiters(ctx, "prevversion")
	if err != nil || len(ws) != 1 || ws[0].ID != "prev" || ws[0].Why.Reason != limiter.ReasonFull {
		t.Fatalf("Waiters with a previous version's waiter queued: %+v %v, want it, full", ws, err)
	}
}

// failingShards plays a shard subscriber whose placement fails for a
// while (a dial timeout, a stale slot map): not a refusal of sharded
// pub/sub.
type failingShards struct{}

func (failingShards) Add(context.Context, string) error {
	return errors.New("dial tcp 10.0.0.7:7001: i/o timeout")
}
func (failingShards) Drop(string) {}

// A wait whose shard channel could not be subscribed goes by the Client's
// plain channel: a release wakes it there, on a server that has no
// SPUBLISH at all, and a release never fails half done for a publish.
func TestWaitWhoseShardSubscriptionFailedGoesByThePlainChannel(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv := redistest.StartServer(t, "--rename-command", "SPUBLISH", "", "--rename-command", "SSUBSCRIBE", "")
	holder := clientFor(t, srv.Client(t))
	waiter := clientFor(t, srv.Client(t))
	limiter.SetShardWakes(waiter, failingShards{})
	hm, _ := holder.Mutex("shardless")
	wm, _ := waiter.Mutex("shardless")
	l, err := hm.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		wl, err := wm.Acquire(ctx, limiter.MaxWait(10*time.Second))
		if err == nil {
			err = wl.Release(ctx)
		}
		got <- err
	}()
	redistest.Eventually(t, 5*time.Second, "queued", func() bool {
		ws, err := inspect.New(holder).Waiters(ctx, "shardless")
		return err == nil && len(ws) == 1
	})
	start := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("holder's Release: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("woken %v after the release: want a wake-up, not the keep-alive", d)
	}
}

// A release that wakes a waiter queued with a shard channel never fails
// half done for the publish, even on a server without SPUBLISH: its
// permits are free afterwards.
func TestReleaseOnAServerWithoutSpublish(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv := redistest.StartServer(t, "--rename-command", "SPUBLISH", "")
	rdb := srv.Client(t)
	m, _ := newMutex(t, rdb, "nospublish")
	l, err := m.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exp := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)
	// weight:expiry:direct-grant ttl (0: wake only):own limit:channel
	rdb.HSet(ctx, keyOf("nospublish", "state"), "?w1", "1:"+exp+":0:1:redsem:{nospublish}:wake:other", "seq", "1")
	rdb.ZAdd(ctx, queueKey("nospublish"), redis.Z{Score: 1, Member: "w1"})
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release waking a shard channel's waiter without SPUBLISH: %v", err)
	}
	if n, err := rdb.ZCard(ctx, keyOf("nospublish", "leases")).Result(); err != nil || n > 1 {
		t.Errorf("leases left: %d %v, want only the placeholder", n, err)
	}
}
