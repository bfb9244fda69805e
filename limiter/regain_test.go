package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/internal/scriptcall"
)

// slowAcquire answers each acquire late while on (a node under load, or
// far away).
type slowAcquire struct {
	delay time.Duration
	on    *atomic.Bool
}

func (h slowAcquire) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h slowAcquire) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h slowAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if _, ok := scriptcall.Args("acquire", cmd.Args()); ok && h.on.Load() {
			time.Sleep(h.delay)
		}
		return next(ctx, cmd)
	}
}

// regainHook delays a regain's acquire (ARGV[14] exact token) and can fail
// the next ordinary acquires.
type regainHook struct {
	delay    time.Duration
	seen     chan struct{}
	failNext *atomic.Int32
}

func (h regainHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h regainHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h regainHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if argv, ok := scriptcall.Args("acquire", cmd.Args()); ok {
			if len(argv) >= 14 && argv[13] == "1" && h.seen != nil {
				select {
				case h.seen <- struct{}{}:
				default:
				}
				time.Sleep(h.delay)
			} else if h.failNext != nil && h.failNext.Add(-1) >= 0 {
				cmd.SetErr(errors.New("injected node failure"))
				return cmd.Err()
			}
		}
		return next(ctx, cmd)
	}
}

// A regain of lease L1 (a given id) that reaches a node after L1 was
// released and the same Client took the id again (L2) must leave L2 alone:
// taking it for L1's (it is the same owner's) and giving it back with L1
// left L2 on fewer nodes than a quorum while its holder believed.
func TestRedlockRegainLeavesANewerLeaseOfTheID(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 30*time.Second)
	seen := make(chan struct{}, 1)
	var failB atomic.Int32
	q.nodes[2].AddHook(regainHook{delay: 500 * time.Millisecond, seen: seen})
	q.nodes[1].AddHook(regainHook{failNext: &failB})
	mu, err := newRedlockMutex(t, q.nodes, "rg", limiter.TTL(10*time.Second), limiter.NodeTimeout(2*time.Second), limiter.Prefix("rg:"))
	if err != nil {
		t.Fatal(err)
	}
	l1, err := mu.Acquire(ctx, limiter.ID("job"))
	if err != nil {
		t.Fatal(err)
	}
	// Node 2 loses the lease.
	if err := q.servers[2].Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l1.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	<-seen // the regain's acquire is on its way to node 2
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	failB.Store(1) // node 1 misses L2's grant
	l2, err := mu.Acquire(ctx, limiter.ID("job"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the regain lands and finishes
	if l2.Err() != nil {
		t.Fatalf("L2 lost: %v", l2.Err())
	}
	other, err := newRedlockMutex(t, q.nodes, "rg", limiter.TTL(10*time.Second), limiter.Prefix("rg:"))
	if err != nil {
		t.Fatal(err)
	}
	if l3, err := other.TryAcquire(ctx); err == nil {
		t.Fatalf("two holders: L2 (%d, Err %v) and another client's %d", l2.Token(), l2.Err(), l3.Token())
	}
}

// Regains run in the background, so a node that lost many leases and
// answers slowly holds up neither the refresh nor the leases a quorum
// confirmed (run one after another inside the refresh, they lost 19 of
// these 20).
func TestRedlockRegainDoesNotHoldUpRefresh(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 60*time.Second)
	var slow atomic.Bool
	q.nodes[2].AddHook(slowAcquire{delay: 250 * time.Millisecond, on: &slow})
	c, err := limiter.NewRedlock(q.nodes, limiter.RestartQuarantine(0), limiter.TTL(3*time.Second), limiter.Prefix("ser:"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var leases []*limiter.Lease
	for i := range 20 {
		mu, err := c.Mutex(fmt.Sprint("m", i))
		if err != nil {
			t.Fatal(err)
		}
		l, err := mu.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	if err := q.servers[2].Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	slow.Store(true)
	time.Sleep(4 * time.Second)
	lost := 0
	for _, l := range leases {
		if l.Err() != nil {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d leases lost although nodes 0 and 1 held them all along: %v", lost, len(leases), leases[0].Err())
	}
	if held := leaseCount(t, q, 2, "ser:"); held != int64(len(leases)) {
		t.Errorf("node 2 holds %d of the %d leases again", held, len(leases))
	}
}

// Grants that land on a node after their lease was released are given
// back: a late grant of the acquire itself, and a regain's.
func TestRedlockLateGrantsAfterReleaseAreGivenBack(t *testing.T) {
	t.Run("acquire", func(t *testing.T) {
		q := startQuorum(t, 3)
		ctx := ctxT(t, 30*time.Second)
		slow := new(atomic.Bool)
		q.nodes[2].AddHook(slowAcquire{delay: 400 * time.Millisecond, on: slow})
		mu, err := newRedlockMutex(t, q.nodes, "lg", limiter.TTL(10*time.Second), limiter.NodeTimeout(time.Second), limiter.Prefix("lg:"))
		if err != nil {
			t.Fatal(err)
		}
		slow.Store(true)
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		l, err := mu.Acquire(short)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		for i := range q.nodes {
			if ids := leaseIDs(t, q, i, "lg:"); len(ids) > 0 {
				t.Errorf("node %d still holds %v after the release", i, ids)
			}
		}
	})
	t.Run("regain", func(t *testing.T) {
		q := startQuorum(t, 3)
		ctx := ctxT(t, 30*time.Second)
		slow := new(atomic.Bool)
		q.nodes[2].AddHook(slowAcquire{delay: 400 * time.Millisecond, on: slow})
		mu, err := newRedlockMutex(t, q.nodes, "rl", limiter.TTL(10*time.Second), limiter.NodeTimeout(time.Second), limiter.Prefix("rl:"))
		if err != nil {
			t.Fatal(err)
		}
		l, err := mu.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.servers[2].Client(t).FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		slow.Store(true)
		if err := l.Refresh(ctx); err != nil { // starts a regain on node 2
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		for i := range q.nodes {
			if ids := leaseIDs(t, q, i, "rl:"); len(ids) > 0 {
				t.Errorf("node %d still holds %v after the release", i, ids)
			}
		}
	})
}

// failSetToken fails every token write-back on a node, and counts them.
type failSetToken struct{ failed *atomic.Int32 }

func (failSetToken) DialHook(next redis.DialHook) redis.DialHook { return next }
func (failSetToken) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h failSetToken) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if _, ok := scriptcall.Args("settoken", cmd.Args()); ok {
			h.failed.Add(1)
			cmd.SetErr(errors.New("injected write-back failure"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

// A node whose token write-back failed gives its grant back rather than
// keep a permit nobody refreshes until the TTL, and the lease's next
// refresh grants it there again under the lease's token.
func TestRedlockFailedWriteBackIsNoOrphan(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 30*time.Second)
	var failed atomic.Int32
	q.nodes[2].AddHook(failSetToken{&failed})
	// Until node 2 is one that needs the write-back (it did not issue
	// the highest token).
	var l *limiter.Lease
	for i := 0; failed.Load() == 0; i++ {
		if i == 20 {
			t.Fatal("node 2 was never written back to")
		}
		// A new Client's proposal an hour off is refused: each node
		// issues its own token, and the quorum writes the highest back
		// to the others. (A Client's later proposals follow the tokens
		// it saw.)
		c, err := limiter.NewRedlock(q.nodes, limiter.RestartQuarantine(0), limiter.TTL(3*time.Second), limiter.Prefix("wb:"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		limiter.ShiftQuorumClock(c, -time.Hour)
		mu, err := c.Mutex(fmt.Sprint("wb", i))
		if err != nil {
			t.Fatal(err)
		}
		if l, err = mu.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	tokens := func(i int) []string {
		var out []string
		for _, k := range q.nodes[i].Keys(ctx, "wb:*:state").Val() {
			if v := q.nodes[i].HGet(ctx, k, ":"+l.ID()).Val(); v != "" {
				out = append(out, v)
			}
		}
		return out
	}
	want := fmt.Sprintf("1:%d:", l.Token())
	var seen []string
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got := tokens(2)
		seen = append(seen, fmt.Sprint(got))
		if len(got) == 1 && got[0][:len(want)] == want {
			return
		}
	}
	t.Fatalf("node 2 never held the lease under its token %d: %v", l.Token(), seen[len(seen)-1])
}
