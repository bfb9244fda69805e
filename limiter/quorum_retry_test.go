package limiter_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/internal/scriptcall"
)

// flakyNode makes a node fail the next acquire (a node error) and delays
// every release without a token (a packet delayed, or a go-redis retry):
// a node slow, restarting or failing over.
type flakyNode struct {
	failAcquires atomic.Int32
	delay        time.Duration
	direct       redis.UniversalClient
}

func (h *flakyNode) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *flakyNode) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *flakyNode) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if _, ok := scriptcall.Args("acquire", args); ok && h.failAcquires.Add(-1) >= 0 {
			cmd.SetErr(errors.New("injected node failure"))
			return cmd.Err()
		}
		if argv, ok := scriptcall.Args("release", args); ok && argv[1] == "" { // any token
			// Sent, but it reaches the node late; the caller hears
			// nothing (its node timeout).
			go func() {
				time.Sleep(h.delay)
				h.direct.Do(context.Background(), args...)
			}()
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

// A Redlock attempt that failed is rolled back by token-less releases on
// the nodes whose answer was lost, which may land late: Acquire's next
// attempt takes a new lease id, so they can never remove its grant (with
// the same id they did, and another Client was granted the mutex too).
func TestRedlockRetryTakesANewID(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 60*time.Second)
	warm, err := newRedlockMutex(t, startQuorumClients(t, q), "warm-up", limiter.TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if wl, err := warm.TryAcquire(ctx); err != nil || wl.Release(ctx) != nil { // scripts loaded on every node
		t.Fatal(err)
	}
	hooks := []*flakyNode{nil, {delay: 1500 * time.Millisecond}, {delay: 1500 * time.Millisecond}}
	for i, h := range hooks {
		if h != nil {
			h.direct = q.servers[i].Client(t)
			h.failAcquires.Store(1)
			q.nodes[i].AddHook(h)
		}
	}
	mu, err := newRedlockMutex(t, q.nodes, "retry-id", limiter.TTL(10*time.Second), limiter.AcquireTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := mu.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	for i, h := range hooks {
		if h != nil && h.failAcquires.Load() > 0 {
			t.Fatalf("node %d: no failure injected (failures left %d)", i, h.failAcquires.Load())
		}
	}
	time.Sleep(2 * time.Second) // the delayed releases land
	plain := startQuorumClients(t, q)
	other, err := newRedlockMutex(t, plain, "retry-id", limiter.TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := other.TryAcquire(ctx)
	if err == nil {
		defer l2.Release(ctx)
		t.Fatalf("two holders of a Redlock mutex: %s (token %d, err %v) and %s (token %d)", l.ID(), l.Token(), l.Err(), l2.ID(), l2.Token())
	}
}

func startQuorumClients(t *testing.T, q quorum) []redis.UniversalClient {
	var out []redis.UniversalClient
	for _, s := range q.servers {
		out = append(out, s.Client(t))
	}
	return out
}

// A node whose grant answers after the caller's ctx ended, of an attempt
// that a quorum won, gives it back (kept, it would outlive a release that
// came first), and the lease's next refresh grants it there again: the
// lease is not left on a bare quorum, one node failure from being lost.
func TestRedlockLateGrantOfAWinningAttemptIsRegained(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 30*time.Second)
	slow := new(atomic.Bool)
	slow.Store(true)
	q.nodes[2].AddHook(slowAcquire{delay: 300 * time.Millisecond, on: slow})
	mu, err := newRedlockMutex(t, q.nodes, "late", limiter.TTL(3*time.Second), limiter.NodeTimeout(time.Second), limiter.Prefix("late:"))
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	l, err := mu.Acquire(short)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	time.Sleep(2500 * time.Millisecond) // the late grant is given back; a refresh (every second) regains it
	for i := range q.nodes {
		if ids := leaseIDs(t, q, i, "late:"); !slices.Equal(ids, []string{l.ID()}) {
			t.Errorf("node %d holds %v, want the lease %s", i, ids, l.ID())
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // a late grant of the release's race lands
	for i := range q.nodes {
		if ids := leaseIDs(t, q, i, "late:"); len(ids) != 0 {
			t.Errorf("node %d holds %v after the release", i, ids)
		}
	}
}

// slowNode delays every command of a node by d.
type slowNode struct{ d time.Duration }

func (h slowNode) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h slowNode) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h slowNode) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		time.Sleep(h.d)
		return next(ctx, cmd)
	}
}

// A holder that acquired while node 0 was down holds nodes 1 and 2; node 0
// comes back empty and grants every waiter, who then looks like one side
// of a split vote. Its first retry may be at once, the next must back off:
// a review saw 367 attempts in 2s (a busy loop) before the back-off.
func TestRedlockSplitRetriesBackOff(t *testing.T) {
	t.Parallel()
	q := startQuorum(t, 3)
	ctx := ctxT(t, 30*time.Second)
	opts := []limiter.Option{limiter.NodeTimeout(100 * time.Millisecond), limiter.TTL(30 * time.Second), limiter.Prefix("loop:")}
	h, err := newRedlockMutex(t, q.nodes, "loop", opts...)
	if err != nil {
		t.Fatal(err)
	}
	q.servers[0].Stop(t)
	l, err := h.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	q.servers[0].Restart(t)
	q.nodes[1].AddHook(slowNode{2 * time.Millisecond}) // node 0 answers first
	q.nodes[2].AddHook(slowNode{2 * time.Millisecond})
	x, err := newRedlockMutex(t, q.nodes, "loop", append(opts, limiter.AcquireTimeout(2*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = x.Acquire(ctx)
	var busy *limiter.BusyError
	if !errors.As(err, &busy) {
		t.Fatalf("Acquire while another holds the mutex: %v, want a BusyError", err)
	}
	if busy.Attempts > 100 {
		t.Fatalf("%d attempts in 2s against a holder missing from one node: the split retry loops", busy.Attempts)
	}
}

// An attempt that failed (node 0 granted, node 1 full) while node 2 was
// paused: node 2 runs the queued grant when it resumes. The rollback's
// give-back for node 2, which was marked down, is kept until its probe
// finds it back, so node 2 does not keep a lease nobody holds for the TTL.
func TestRedlockRollbackReachesAPausedNode(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 30*time.Second)
	const p = "phan:"
	mu, err := newRedlockMutex(t, q.nodes, "phan", limiter.NodeTimeout(200*time.Millisecond), limiter.TTL(20*time.Second), limiter.Prefix(p))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := mu.TryAcquire(ctx); err != nil || l.Release(ctx) != nil {
		t.Fatal("warm-up:", err)
	}
	one := redistest.Limiter(t, q.nodes[1], limiter.Prefix(p), limiter.TTL(20*time.Second))
	m1, err := one.Mutex("phan")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m1.TryAcquire(ctx); err != nil { // node 1 alone is full
		t.Fatal(err)
	}
	q.servers[2].Pause(t)
	if _, err := mu.TryAcquire(ctx); err == nil {
		t.Fatal("a quorum of one node granted")
	}
	q.servers[2].Resume(t)
	redistest.Eventually(t, 5*time.Second, "node 2 gives the failed attempt's grant back", func() bool {
		return len(leaseIDs(t, q, 2, p)) == 0
	})
}
