package limiter_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// The Redis commands the scripts run (commandstats counts them) are most of
// a cycle's server time: these pin what the hot paths may run, so a change
// that makes them walk the queue or sweep again shows here, not only in a
// benchmark.

// An uncontended acquire+release reads no sorted set: nobody waits (the
// queue was seen empty at the last ticket) and there is room (no sweep).
func TestUncontendedCycleReadsNoSet(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 20*time.Second)
	rdb := srv.Client(t)
	mu, err := newMutex(t, rdb, "inner-uncontended")
	if err != nil {
		t.Fatal(err)
	}
	// A waiter came and went: the next grant or release finds the queue
	// empty and says so in the state.
	waiterComesAndGoes(t, rdb, mu, "inner-uncontended")
	tryCycle(t, ctx, mu)

	srv.ResetStats(t)
	const n = 20
	for range n {
		tryCycle(t, ctx, mu)
	}
	calls := srv.CommandCalls(t)
	if s := redistest.Scripts(calls); s != 2*n {
		t.Fatalf("%d cycles ran %d scripts, want %d: %v", n, s, 2*n, calls)
	}
	for _, cmd := range []string{"zrange", "zrangebyscore", "zcard", "zscore"} {
		if calls[cmd] != 0 {
			t.Errorf("%d uncontended cycles ran %s %d times, want none: %v", n, cmd, calls[cmd], calls)
		}
	}
}

// A refused TryAcquire reads the leases once: the sweep's look at the
// earliest lease also answers when to retry.
func TestRefusedTryReadsLeasesOnce(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 20*time.Second)
	rdb := srv.Client(t)
	holderMu, err := newMutex(t, rdb, "inner-busy")
	if err != nil {
		t.Fatal(err)
	}
	mu, err := newMutex(t, rdb, "inner-busy") // another Client
	if err != nil {
		t.Fatal(err)
	}
	held, err := holderMu.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	if _, err := mu.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("TryAcquire on a held mutex: %v, want ErrBusy", err)
	}
	// The holder's record of its limit in use (within 0.1s of the grant)
	// is its keep-alive's, not the tries': let it land first.
	redistest.Eventually(t, 5*time.Second, "the holder's limit recorded", func() bool {
		u, err := inUseOf(ctx, holderMu)
		return err == nil && len(u.Limits) > 0
	})

	srv.ResetStats(t)
	const n = 20
	for range n {
		if _, err := mu.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
			t.Fatalf("TryAcquire on a held mutex: %v, want ErrBusy", err)
		}
	}
	calls := srv.CommandCalls(t)
	if s := redistest.Scripts(calls); s != n {
		t.Fatalf("%d refused tries ran %d scripts: %v", n, s, calls)
	}
	if calls["zrange"]+calls["zrangebyscore"] != n {
		t.Errorf("%d refused tries read the leases %d times (zrange %d, zrangebyscore %d), want once each: %v",
			n, calls["zrange"]+calls["zrangebyscore"], calls["zrange"], calls["zrangebyscore"], calls)
	}
}

// A waiter queued by a Client that writes only what an enqueue always
// wrote (the ticket, the queue entry, the waiter's record: an older
// version, mid-upgrade) is woken by the next release, and no newcomer
// overtakes it, though the queue had been seen empty before.
func TestWaiterQueuedByOlderClientIsWoken(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 20*time.Second)
	rdb := srv.Client(t)
	const name = "inner-mixed"
	mu, err := newMutex(t, rdb, name, limiter.TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waiterComesAndGoes(t, rdb, mu, name)
	held, err := mu.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}

	const channel = "inner-mixed-old-client"
	sub := rdb.Subscribe(ctx, channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	state := keyOf(name, "state")
	seq, err := rdb.HIncrBy(ctx, state, "seq", 1).Result()
	if err != nil {
		t.Fatal(err)
	}
	ms, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// "<weight>:<expiry ms>:<direct-grant ttl ms>:<own limit>:<channel>", 0: wake only.
	rec := fmt.Sprintf("1:%d:0:1:%s", ms.UnixMilli()+10_000, channel)
	if err := rdb.ZAdd(ctx, queueKey(name), redis.Z{Score: float64(seq), Member: "w-old"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, state, "?w-old", rec).Err(); err != nil {
		t.Fatal(err)
	}

	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-sub.Channel():
		if m.Payload != "w-old" {
			t.Fatalf("the older Client's waiter was told %q, want its wait id", m.Payload)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the release did not wake the waiter an older Client queued")
	}
	other, err := newMutex(t, srv.Client(t), name)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := other.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
		if err == nil {
			_ = l.Release(ctx)
		}
		t.Fatalf("a newcomer's TryAcquire with a live waiter queued ahead: %v, want ErrBusy", err)
	}
}

// waiterComesAndGoes holds mu while another goroutine queues for it, then
// lets the waiter take it and release it.
func waiterComesAndGoes(t *testing.T, rdb *redis.Client, mu *limiter.Semaphore, name string) {
	t.Helper()
	ctx := ctxT(t, 20*time.Second)
	held, err := mu.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := mu.Acquire(ctx)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	redistest.Eventually(t, 10*time.Second, "queued", func() bool { return rdb.ZCard(ctx, queueKey(name)).Val() == 1 })
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// contend runs clients Clients with perClient goroutines each, every one
// acquiring and releasing (holding 1ms) rounds times, and returns the
// commands Redis ran (commandstats, script-internal ones included, the
// connections' own HELLO, CLIENT and INFO left out) and the acquisitions.
func contend(t *testing.T, srv *redistest.Server, name string, clients, perClient, rounds int, limit int64, opts ...limiter.NameOption) (map[string]int64, int) {
	t.Helper()
	ctx := ctxT(t, 60*time.Second)
	sems := make([]acquirer, clients)
	for i := range sems {
		sem, err := newSemaphore(t, srv.Client(t), name, limit, append([]limiter.NameOption{limiter.AcquireTimeout(0)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		sems[i] = sem
		// Loads the library and reads INFO before the count starts.
		l, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	srv.ResetStats(t)
	churn(t, ctx, sems, perClient, rounds)
	if t.Failed() {
		t.FailNow()
	}
	calls := srv.CommandCalls(t)
	for cmd := range calls {
		if cmd == "hello" || cmd == "info" || cmd == "config|resetstat" || strings.HasPrefix(cmd, "client") {
			delete(calls, cmd)
		}
	}
	return calls, clients * perClient * rounds
}

func perAcquisition(calls map[string]int64, n int) (all float64) {
	for _, v := range calls {
		all += float64(v)
	}
	return all / float64(n)
}

// A contended acquisition costs Redis 18 commands (8 goroutines of one
// Client on a mutex; direct grants): a newcomer that finds no room reads
// the queue's head, to learn whether it heads the queue, and behind a live
// waiter no lease; its ticket rides on the HSET of its record (no
// HINCRBY). It was 20.
func TestContendedAcquisitionCommands(t *testing.T) {
	srv := redistest.StartServer(t)
	calls, n := contend(t, srv, "inner-contended", 1, 8, 40, 1)
	got := perAcquisition(calls, n)
	t.Logf("%d acquisitions: %.2f commands each", n, got)
	if got > 18.5 {
		t.Errorf("%d contended acquisitions ran %.2f commands each, want at most 18.5: %v", n, got, calls)
	}
	if calls["hincrby"] != 0 {
		t.Errorf("%d contended acquisitions ran HINCRBY %d times, want none (the ticket rides on the HSET): %v", n, calls["hincrby"], calls)
	}
}

// Without direct grants (a TTL under QueueTTL) releases only wake, and a
// waiter woken once is not woken again by the releases that come while
// its attempt is on its way: 0.6 PUBLISH per acquisition, where every
// release woke every waiter that fit again and 2.6 went out.
func TestWokenWaitersAreNotWokenAgain(t *testing.T) {
	srv := redistest.StartServer(t)
	calls, n := contend(t, srv, "inner-woken", 4, 2, 60, 5, limiter.TTL(2*time.Second))
	got := float64(calls["publish"]) / float64(n)
	t.Logf("%d acquisitions: %.2f PUBLISH, %.2f commands each", n, got, perAcquisition(calls, n))
	if got > 1.2 {
		t.Errorf("%d acquisitions woken by releases sent %.2f PUBLISH each, want at most 1.2: %v", n, got, calls)
	}
}

// The '!' marker, step by step: a waiter woken once is skipped by the
// releases after (its weight still spoken for), and woken again once its
// attempt queued it anew (here refused by a pause) and room comes back.
func TestWokenMarkerResetByRequeue(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 20*time.Second)
	const name = "inner-marker"
	rdb := srv.Client(t)
	holder, err := newSemaphore(t, rdb, name, 2)
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := newSemaphore(t, srv.Client(t), name, 2) // another Client
	if err != nil {
		t.Fatal(err)
	}
	held := make([]*limiter.Lease, 2)
	for i := range held {
		if held[i], err = holder.TryAcquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A waiter that never acts on its wake-ups: its entry lives QueueTTL.
	if granted, err := limiter.AcquireOnce(ctx, waiter, "w", "w", false); err != nil || granted {
		t.Fatalf("AcquireOnce on a full semaphore: granted %v, %v", granted, err)
	}
	srv.ResetStats(t)
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The room left beside the waiter's permit, taken and given back.
	for range 10 {
		l, err := holder.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := srv.CommandCalls(t)["publish"]; n != 1 {
		t.Fatalf("12 releases with one waiter that fits sent %d PUBLISH, want 1", n)
	}

	ins := inspect.New(clientFor(t, rdb))
	if _, err := ins.Pause(ctx, name, time.Minute); err != nil {
		t.Fatal(err)
	}
	if granted, err := limiter.AcquireOnce(ctx, waiter, "w", "w", false); err != nil || granted {
		t.Fatalf("AcquireOnce while paused: granted %v, %v", granted, err)
	}
	srv.ResetStats(t)
	if err := ins.Unpause(ctx, name); err != nil {
		t.Fatal(err)
	}
	if n := srv.CommandCalls(t)["publish"]; n != 1 {
		t.Fatalf("lifting the pause sent %d PUBLISH, want 1: the waiter queued again must be woken again", n)
	}
}

// A wake-up lost once (here: the releaser's own waiter, whose release
// reply is lost) is made good by the next release once the marker has
// lapsed (WOKEN_MS, 200ms), not only by the keep-alive a second later.
func TestLostWakeUpMadeGoodByALaterRelease(t *testing.T) {
	common, err1 := os.ReadFile("internal/redisstore/common.lua")
	release, err2 := os.ReadFile("internal/redisstore/release.lua")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	rel := redis.NewScript(string(common) + "begin_call()\n" + string(release)) // as scripts.go sends it
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 30*time.Second)
	const name = "rev-lost"
	rdb := srv.Client(t)
	a, err := newSemaphore(t, rdb, name, 2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newSemaphore(t, srv.Client(t), name, 2, limiter.TTL(time.Second)) // TTL < QueueTTL: woken only
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{keyOf(name, "leases"), keyOf(name, "state"), keyOf(name, "queue"), keyOf(name, "pause")}
	h1, err := limiter.AcquireOnce(ctx, a, "h1", "", false)
	if err != nil || !h1 {
		t.Fatal(err)
	}
	h2, err := a.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		l, err := b.Acquire(ctx)
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		_ = l.Release(ctx)
	}()
	redistest.Eventually(t, 5*time.Second, "queued", func() bool { return rdb.ZCard(ctx, keys[2]).Val() == 1 })
	w := rdb.ZRange(ctx, keys[2], 0, 0).Val()[0]
	rec := rdb.HGet(ctx, keys[1], "?"+w).Val()
	// release h1 as the waiter's own Client would, the reply (its wake) lost
	if err := rel.Run(ctx, rdb, keys, "h1", "", chanOf(rec), "1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("marker after the lost wake: %q", rdb.HGet(ctx, keys[1], "!"+w).Val())
	time.Sleep(250 * time.Millisecond) // past WOKEN_MS
	if err := h2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	at := <-got
	t.Logf("the waiter was granted %v after the next release", at.Sub(released))
	if at.Sub(released) > 300*time.Millisecond {
		t.Errorf("a waiter whose one wake-up was lost waited %v after the next release (keep-alive)", at.Sub(released))
	}
}

// chanOf is the wake channel at the end of a waiter record
// "<w>:<exp>:<hand>:<limit>:<channel>".
func chanOf(rec string) string {
	n := 0
	for i := range len(rec) {
		if rec[i] == ':' {
			n++
			if n == 4 {
				return rec[i+1:]
			}
		}
	}
	return ""
}
