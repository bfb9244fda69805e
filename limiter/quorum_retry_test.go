package limiter_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter"
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
		if _, ok := limiter.ScriptCall("acquire", args); ok && h.failAcquires.Add(-1) >= 0 {
			cmd.SetErr(errors.New("injected node failure"))
			return cmd.Err()
		}
		if argv, ok := limiter.ScriptCall("release", args); ok && argv[1] == "" { // any token
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
