package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

type quorum struct {
	servers []*redistest.Server
	nodes   []redis.UniversalClient
	// observers read the nodes for the test on connections of their own:
	// a node client the Client uses may answer with the last dial error
	// its probes met while the node restarted.
	observers []*redis.Client
}

func startQuorum(t *testing.T, n int) quorum {
	q := quorum{servers: redistest.StartNodes(t, n)}
	for _, s := range q.servers {
		q.nodes = append(q.nodes, s.Client(t))
		q.observers = append(q.observers, s.Client(t))
	}
	return q
}

func (q quorum) addrs() []string {
	var a []string
	for _, s := range q.servers {
		a = append(a, s.Addr())
	}
	return a
}

// leaseCount is how many leases node i holds for the semaphore (its
// sorted set), read straight from Redis.
func leaseCount(t *testing.T, q quorum, i int, prefix string) int64 {
	return int64(len(leaseIDs(t, q, i, prefix)))
}

// leaseIDs are the ids of the leases node i holds under prefix, sorted.
func leaseIDs(t *testing.T, q quorum, i int, prefix string) []string {
	t.Helper()
	keys, err := q.observers[i].Keys(context.Background(), prefix+"*:leases").Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, k := range keys {
		for _, m := range q.observers[i].ZRange(context.Background(), k, 0, -1).Val() {
			if m != "" { // the set's keep-alive member
				ids = append(ids, m)
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// One case per quorum shape (Size): all of 3 nodes (weighted, limit 5),
// 3 of 4 (limit 2) and all of 4 (weighted, limit 5). Other limits on
// these nodes only repeat a shape, and the children burn CPU.
func TestRedlockLimitHoldsAcrossProcesses(t *testing.T) {
	for _, nodes := range []int{3, 4} {
		t.Run(fmt.Sprintf("%dnodes", nodes), func(t *testing.T) {
			t.Parallel() // each has its own nodes
			q := startQuorum(t, nodes)
			b := backend{
				kind:   "redlock",
				client: func(t testing.TB) redis.UniversalClient { return q.servers[0].Client(t) },
				env:    []string{"REDSEM_TEST_ADDRS=" + strings.Join(q.addrs(), ","), "REDSEM_TEST_REDLOCK=1"},
			}
			if nodes == 4 {
				t.Run("limit2", func(t *testing.T) { runProcesses(t, b, 2, 1, "", 0) })
			}
			t.Run("weighted1to5limit5", func(t *testing.T) { runProcesses(t, b, 5, 5, "", 0) })
		})
	}
}

func TestRedlockBasics(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 20*time.Second)
	sem, err := newRedlockSemaphore(t, q.nodes, "basics", 2)
	if err != nil {
		t.Fatal(err)
	}
	a, err := sem.TryAcquire(ctx, limiter.ID("a"))
	if err != nil {
		t.Fatal(err)
	}
	// One id, one holder: a live lease of "a" makes a second "a" wait.
	if _, err := sem.TryAcquire(ctx, limiter.ID("a")); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("second holder of one id on a quorum: %v", err)
	}
	b, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token() <= a.Token() {
		t.Fatalf("tokens %d then %d", a.Token(), b.Token())
	}
	if _, err := sem.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("full: %v", err)
	}
	if n, err := available(ctx, sem); err != nil || n != 0 {
		t.Fatalf("Available %d, %v", n, err)
	}
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		err := sem.Do(ctx, func(context.Context) error { return nil }, limiter.Weight(1))
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// One node stopped: a mutex on 3 nodes (quorum 2) and a limit-2 semaphore
// on 4 nodes (quorum 3) keep working; the node restarted empty cannot let
// anyone over the limit.
func TestRedlockOneNodeDown(t *testing.T) {
	t.Parallel()
	t.Run("mutex3nodes", func(t *testing.T) { testOneNodeDown(t, 3, 1) })
	t.Run("limit2on4nodes", func(t *testing.T) { testOneNodeDown(t, 4, 2) })
}

func testOneNodeDown(t *testing.T, nodes int, limit int64) {
	q := startQuorum(t, nodes)
	ctx := ctxT(t, 30*time.Second)
	down := nodes - 1
	opts := []limiter.Option{limiter.TTL(2 * time.Second), limiter.Prefix("down1:")}
	sem, err := newRedlockSemaphore(t, q.nodes, "one-down", limit, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var before []*limiter.Lease
	for range limit - 1 {
		l, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, l)
	}
	q.servers[down].Stop(t)

	l, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatalf("acquire with one node down: %v", err)
	}
	if err := l.Refresh(ctx); err != nil {
		t.Fatalf("refresh with one node down: %v", err)
	}
	other, _ := newRedlockSemaphore(t, q.nodes, "one-down", limit, append(opts, limiter.TTL(5*time.Second))...)
	adopted, err := other.Resume(ctx, l.Ticket())
	if err != nil {
		t.Fatalf("resume with one node down: %v", err)
	}
	time.Sleep(time.Second) // auto-refresh keeps every lease alive on the rest
	for _, b := range append(before, adopted) {
		if b.Err() != nil {
			t.Fatalf("lost with one node down: %v", b.Err())
		}
	}
	if err := adopted.Release(ctx); err != nil {
		t.Fatalf("release with one node down: %v", err)
	}
	last, err := sem.Acquire(ctx) // the semaphore is full again, on the nodes that are up
	if err != nil {
		t.Fatal(err)
	}

	q.servers[down].Restart(t) // empty: it would grant anything
	// go-redis may answer with its last dial error for a moment.
	redistest.Eventually(t, 10*time.Second, "the client reaches the restarted node", func() bool {
		return q.nodes[down].Ping(ctx).Err() == nil
	})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won int
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := sem.TryAcquire(ctx); err == nil {
				mu.Lock()
				won++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if won != 0 {
		t.Fatalf("%d acquisitions over the limit after an empty node rejoined", won)
	}
	// Grants that come after the outcome are given back in the background,
	// and the refreshes grant the held leases there again: the node ends
	// with exactly those.
	var held []string
	for _, l := range append(before, last) {
		held = append(held, l.ID())
	}
	slices.Sort(held)
	redistest.Eventually(t, 5*time.Second, "the restarted node holds the held leases and nothing else", func() bool {
		return slices.Equal(leaseIDs(t, q, down, "down1:"), held)
	})
	if err := last.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Two of three nodes down: acquire fails closed naming the failed nodes,
// holders learn of loss before their TTL, and the survivor keeps nothing.
func TestRedlockMajorityDown(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 30*time.Second)
	const ttl = 1500 * time.Millisecond
	sem, err := newRedlockMutex(t, q.nodes, "majority-down", limiter.Prefix("down2:"),
		limiter.TTL(ttl), limiter.RefreshInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	holder, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	stopped := time.Now()
	q.servers[1].Stop(t)
	q.servers[2].Stop(t)

	_, err = sem.TryAcquire(ctx)
	var qe *limiter.QuorumError
	if !errors.As(err, &qe) {
		t.Fatalf("want a QuorumError, got %v", err)
	}
	for _, s := range q.servers[1:] {
		if !strings.Contains(err.Error(), s.Addr()) {
			t.Fatalf("error does not name failed node %s: %v", s.Addr(), err)
		}
	}
	// The survivor answered "full" (the holder is there); the rest failed.
	if len(qe.Failed) != 2 || len(qe.Busy) != 1 || qe.Busy[0] != q.servers[0].Addr() || !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("QuorumError details: %+v", qe)
	}
	// A name nobody holds: the survivor grants, and must give it back.
	free, _ := newRedlockMutex(t, q.nodes, "majority-down-free", limiter.Prefix("down2:"))
	if _, err := free.TryAcquire(ctx); !errors.As(err, &qe) || errors.Is(err, limiter.ErrBusy) || len(qe.Failed) != 2 {
		t.Fatalf("want a QuorumError with two failed nodes and none busy, got %v", err)
	}
	if n := leaseCount(t, q, 0, "down2:"); n != 1 {
		t.Fatalf("survivor holds %d leases after the failed attempt, want only the holder's", n)
	}
	select {
	case <-holder.Context().Done():
	case <-time.After(3 * ttl):
		t.Fatal("holder never learned its lease was lost")
	}
	if since := time.Since(stopped); since >= ttl {
		t.Fatalf("loss reported %v after the nodes stopped, TTL %v", since, ttl)
	}
	if !errors.Is(holder.Err(), limiter.ErrLeaseLost) {
		t.Fatalf("holder err: %v", holder.Err())
	}
}

// A paused node costs the node timeout, not the pause.
func TestRedlockPausedNode(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 30*time.Second)
	const nodeTimeout = 100 * time.Millisecond
	sem, err := newRedlockMutex(t, q.nodes, "paused-node", limiter.NodeTimeout(nodeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	q.servers[0].Pause(t)
	defer q.servers[0].Resume(t)
	start := time.Now()
	l, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("acquire with a paused node: %v", err)
	}
	// The pause lasts until the end of the test; this bound only tells a
	// node-timeout wait (0.1s) from waiting out the pause or go-redis'
	// 3s read timeout.
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("acquire took %v with node timeout %v", took, nodeTimeout)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A weighted acquire that one node refuses is undone on the nodes that
// granted it (limit 5 on 3 nodes needs all 3).
func TestRedlockPartialWeightedRollback(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 20*time.Second)
	single, err := redistest.Limiter(t, q.nodes[0], limiter.Prefix("partial:")).Semaphore("partial", 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := single.TryAcquire(ctx, limiter.Weight(4)); err != nil { // node 0 nearly full
		t.Fatal(err)
	}
	sem, err := newRedlockSemaphore(t, q.nodes, "partial", 5, limiter.Prefix("partial:"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = sem.TryAcquire(ctx, limiter.Weight(3))
	if !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("want busy (node 0 full), got %v", err)
	}
	for _, i := range []int{1, 2} {
		redistest.Eventually(t, 5*time.Second, "the failed weighted acquire leaves no members behind", func() bool {
			return leaseCount(t, q, i, "partial:") == 0
		})
	}
	if n := leaseCount(t, q, 0, "partial:"); n != 1 {
		t.Fatalf("node 0 has %d leases, want only the single-node one", n)
	}
}

// Tokens keep increasing while nodes stop and restart empty.
func TestRedlockFencingAcrossRestarts(t *testing.T) {
	t.Parallel()
	q := startQuorum(t, 3)
	ctx := ctxT(t, 60*time.Second)
	mu, err := newRedlockMutex(t, q.nodes, "fence-restarts")
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	step := func(phase string) {
		for range 20 {
			l, err := mu.Acquire(ctx)
			if err != nil {
				t.Fatalf("%s: %v", phase, err)
			}
			if l.Token() <= last {
				t.Fatalf("%s: token %d after %d", phase, l.Token(), last)
			}
			last = l.Token()
			if err := l.Release(ctx); err != nil {
				t.Fatalf("%s: release: %v", phase, err)
			}
		}
	}
	step("all up")
	for i := range q.servers {
		q.servers[i].Stop(t)
		step("node down")
		q.servers[i].Restart(t)
		step("node restarted empty")
	}
}

func TestRedlockFiveNodes(t *testing.T) {
	q := startQuorum(t, 5)
	ctx := ctxT(t, 20*time.Second)
	sem, err := newRedlockSemaphore(t, q.nodes, "five", 1, limiter.NodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	q.servers[0].Stop(t)
	q.servers[3].Stop(t)
	l, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("3 of 5 up: %v", err)
	}
	if _, err := sem.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("second holder on 3 of 5: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	q.servers[1].Stop(t)
	_, err = sem.TryAcquire(ctx)
	var qe *limiter.QuorumError
	if !errors.As(err, &qe) || qe.Quorum != 3 || len(qe.Failed) != 3 {
		t.Fatalf("2 of 5 up: want a QuorumError with quorum 3 and 3 failed, got %v", err)
	}
}

func TestRedlockBadNodes(t *testing.T) {
	a := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	b := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	var nilClient *redis.Client
	cases := map[string][]redis.UniversalClient{
		"none":      nil,
		"nil node":  {a, nil},
		"typed nil": {a, nilClient},
		"duplicate": {a, b},
		"same":      {a, a},
	}
	for name, nodes := range cases {
		_, err := newRedlockSemaphore(t, nodes, "n", 1)
		var arg *limiter.ArgumentError
		if !errors.As(err, &arg) || arg.Arg != "nodes" {
			t.Errorf("%s: want an ArgumentError for nodes, got %v", name, err)
		}
	}
	if _, err := newRedlockMutex(t, []redis.UniversalClient{a}, "n", limiter.NodeTimeout(time.Hour)); !errors.Is(err, limiter.ErrInvalidArgument) {
		t.Errorf("node timeout above TTL: %v", err)
	}
}

// A retry with the id of a live lease that fails to reach a quorum must not
// take that lease away from the nodes it is on.
func TestRedlockFailedRetryKeepsExistingLease(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 20*time.Second)
	mu, err := newRedlockMutex(t, q.nodes, "retry-keeps", limiter.Prefix("keeps:"), limiter.NodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	held, err := mu.Acquire(ctx, limiter.ID("task-1"))
	if err != nil {
		t.Fatal(err)
	}
	held.StopRefresh()
	q.servers[1].Stop(t)
	q.servers[2].Stop(t)
	if _, err := mu.TryAcquire(ctx, limiter.ID("task-1")); err == nil {
		t.Fatal("acquire on 1 of 3 nodes succeeded")
	}
	if n := leaseCount(t, q, 0, "keeps:"); n != 1 {
		t.Fatalf("the failed retry removed the live lease from node 0 (%d left)", n)
	}
}

// A waiter that can get only a minority of nodes (the holder has the
// others) waits without a busy loop: its failed attempts are given back
// silently, so they wake nobody, itself included. (Issue 11: 5,058
// attempts in 3s before.)
func TestRedlockWaiterDoesNotBusyLoop(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 30*time.Second)
	holder, err := newRedlockMutex(t, q.nodes[:2], "busyloop")
	if err != nil {
		t.Fatal(err)
	}
	l, err := holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Two waiters in two Clients: each attempt is granted on c alone and
	// rolled back there. Were a rollback to wake c's queue, each waiter's
	// rollback would wake the other, in a loop.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	q.servers[2].ResetStats(t)
	for i := range errs {
		waiter, err := newRedlockMutex(t, q.nodes, "busyloop", limiter.AcquireTimeout(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = waiter.Acquire(ctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if !errors.Is(err, limiter.ErrTimeout) {
			t.Fatalf("waiter on a held mutex: %v, want a timeout", err)
		}
	}
	calls := q.servers[2].CommandCalls(t)
	if scripts := redistest.Scripts(calls); scripts > 120 || calls["publish"] > 10 {
		t.Fatalf("node c ran %d scripts and %d PUBLISH during a 3s wait of two waiters: a busy loop", scripts, calls["publish"])
	}
	t.Logf("node c during a 3s wait: %v", calls)
	_ = l.Release(ctx)
}

// Fencing tokens never go backwards after a name's keys expired, whatever
// the clocks of the Redlock clients that proposed them: a client an hour
// ahead, then one on time, then one an hour behind.
func TestRedlockTokensIgnoreClientClocks(t *testing.T) {
	t.Parallel()
	q := startQuorum(t, 3)
	ctx := ctxT(t, 60*time.Second)
	const ttl = 200 * time.Millisecond
	var last int64
	for _, shift := range []time.Duration{time.Hour, 0, -time.Hour} {
		c, err := limiter.NewRedlock(q.nodes, limiter.TTL(ttl), limiter.RestartQuarantine(0))
		if err != nil {
			t.Fatal(err)
		}
		limiter.ShiftQuorumClock(c, shift)
		mu, _ := c.Mutex("clock-skew")
		l, err := mu.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("client clock off by %v: token %d after %d", shift, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
		// Wait for the keys, and the last token with them, to expire.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			n := int64(0)
			for _, node := range q.nodes {
				n += node.Exists(ctx, "redsem:{clock-skew}:state").Val()
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the keys did not expire")
			}
		}
	}
}

// A quorum lost for a moment (two of three nodes restarting) delays
// Acquire rather than failing it, within AcquireTimeout; once that runs
// out the QuorumError is returned.
func TestRedlockAcquireRetriesAFailedQuorum(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 30*time.Second)
	mu, err := newRedlockMutex(t, q.nodes, "quorum-back", limiter.AcquireTimeout(5*time.Second), limiter.TTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	q.servers[1].Stop(t)
	q.servers[2].Stop(t)
	go func() {
		time.Sleep(500 * time.Millisecond)
		q.servers[1].Restart(t)
		q.servers[2].Restart(t)
	}()
	l, err := mu.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire while the quorum came back: %v", err)
	}
	_ = l.Release(ctx)

	q.servers[2].Stop(t)
	q.servers[1].Stop(t)
	short, _ := newRedlockMutex(t, q.nodes, "quorum-gone", limiter.AcquireTimeout(300*time.Millisecond), limiter.TTL(time.Second))
	if _, err := short.Acquire(ctx); !errors.As(err, new(*limiter.QuorumError)) {
		t.Fatalf("Acquire with the quorum gone for good: %v, want the QuorumError", err)
	}
}

// A refresh grants a lease that a quorum holds again on a node that lost
// it, so a rolling restart of every node (each empty, each within its
// restart quarantine) keeps a long-held lease, which without that would
// be lost at the second restart.
func TestRedlockRollingRestartKeepsTheLease(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 60*time.Second)
	const ttl = time.Second
	opts := []limiter.Option{limiter.TTL(ttl), limiter.RestartQuarantine(ttl), limiter.Prefix("rolling:")}
	mu, err := newRedlockMutex(t, q.nodes, "rolling", opts...)
	if err != nil {
		t.Fatal(err)
	}
	// The nodes are new: the first grant waits out their quarantine, and a
	// node whose quarantine ended a moment after the quorum's grants it at
	// a refresh. Until every node holds it, the lease is a bare quorum,
	// which a restart loses.
	l, err := mu.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := func(i int) bool { return slices.Equal(leaseIDs(t, q, i, "rolling:"), []string{l.ID()}) }
	redistest.Eventually(t, 10*time.Second, "every node holds the lease", func() bool { return held(0) && held(1) && held(2) })
	for i := range q.servers {
		q.servers[i].Restart(t)
		restarted := time.Now()
		redistest.Eventually(t, 10*time.Second, fmt.Sprintf("the lease is granted again on restarted node %d", i), func() bool {
			return l.Err() != nil || held(i)
		})
		if err := l.Err(); err != nil {
			t.Fatalf("lost after restarting node %d: %v", i, err)
		}
		// The node grants nothing for its quarantine (ttl); the holder's
		// next refresh (every ttl/3) asks it again.
		took := time.Since(restarted)
		t.Logf("node %d: the lease was granted again %v after its restart", i, took.Round(time.Millisecond))
		if took > ttl+time.Second {
			t.Errorf("node %d: the lease was granted again %v after its restart: over a second after its quarantine", i, took.Round(time.Millisecond))
		}
		redistest.Eventually(t, 10*time.Second, "every node holds the lease", func() bool { return held(0) && held(1) && held(2) })
	}
	// Each node holds the lease with its own token, so a later quorum's
	// token is higher.
	for i, n := range q.nodes {
		keys := n.Keys(ctx, "rolling:*:state").Val()
		if len(keys) != 1 {
			t.Fatalf("node %d: state keys %v", i, keys)
		}
		rec := n.HGet(ctx, keys[0], ":"+l.ID()).Val()
		if want := fmt.Sprintf("1:%d:", l.Token()); !strings.HasPrefix(rec, want) {
			t.Errorf("node %d holds the lease as %q, want the token %d", i, rec, l.Token())
		}
	}
	other, err := newRedlockMutex(t, q.nodes, "rolling", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("another client after the rolling restart: %v, want ErrBusy", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// dialCounter counts a client's dials.
type dialCounter struct{ n atomic.Int64 }

func (d *dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d.n.Add(1)
		return next(ctx, network, addr)
	}
}
func (d *dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (d *dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A node that refuses connections is marked down at its first failure and
// not asked again by acquisitions, releases and refreshes until a probe
// (one PING per NodeTimeout) finds it back: a dead node sets the pace of
// nothing. Before, every acquisition dialled it (with go-redis' retries),
// in the eviction check, the quorum call and the rollback.
func TestRedlockDeadNodeIsNotAskedPerAcquisition(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 30*time.Second)
	dials := new(dialCounter)
	q.nodes[2].AddHook(dials)
	mu, err := newRedlockMutex(t, q.nodes, "dead-node", limiter.NodeTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := mu.TryAcquire(ctx); err != nil || l.Release(ctx) != nil {
		t.Fatal("warm-up:", err)
	}
	q.servers[2].Stop(t)
	before, start := dials.n.Load(), time.Now()
	const cycles = 30
	for range cycles {
		l, err := mu.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("acquire with one node refusing: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release with one node refusing: %v", err)
		}
	}
	// The first failures' dials (go-redis tries again: up to 4 each, and
	// the eviction check's INFO may fail beside the first vote), and one
	// probe per NodeTimeout (2s) the cycles took, and one more. Asked on
	// every acquisition, it would be 30 or more.
	if n, most := dials.n.Load()-before, int64(2*4+time.Since(start)/(2*time.Second)+1); n > most {
		t.Fatalf("%d dials to the refusing node in %d acquisitions (%v), want at most %d: it is asked every time",
			n, cycles, time.Since(start).Round(time.Millisecond), most)
	}
}

// With two of three nodes refusing, a failed acquisition is a
// *QuorumError naming both, by address.
func TestRedlockQuorumErrorNamesTheDownNodes(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 30*time.Second)
	mu, err := newRedlockMutex(t, q.nodes, "two-down", limiter.NodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	q.servers[1].Stop(t)
	q.servers[2].Stop(t)
	for i := range 2 { // the first finds them down, the second skips them
		_, err := mu.TryAcquire(ctx)
		var qe *limiter.QuorumError
		if !errors.As(err, &qe) || len(qe.Failed) != 2 || qe.Failed[q.servers[1].Addr()] == nil || qe.Failed[q.servers[2].Addr()] == nil {
			t.Fatalf("try %d with two of three nodes down: %v, want a QuorumError naming both", i, err)
		}
	}
}
