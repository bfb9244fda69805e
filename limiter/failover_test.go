package limiter_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// retryFailover retries fn while the failover client still reaches for
// the dead master (pooled connections, its own retries), for up to 5s.
func retryFailover(fn func() error) error {
	err := fn()
	for end := time.Now().Add(5 * time.Second); err != nil && time.Now().Before(end); err = fn() {
		var re *limiter.ReplicationError
		if errors.Is(err, limiter.ErrBusy) || errors.As(err, &re) {
			return err // an answer, not a connection failure
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// An acquisition the replica never got is lost in a failover. Without
// WaitReplicas, the first Client believes it holds the mutex while a
// second Client is granted it on the promoted replica: two holders. With
// it, the first acquire fails instead, saying no replica confirmed it.
func TestWaitReplicasFailoverKeepsOneHolder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []limiter.Option
	}{
		{"without", nil}, // the control: the failover does lose the grant
		{"with", []limiter.Option{limiter.WaitReplicas(1, 300*time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			f := redistest.StartFailover(t)
			// A TTL far beyond the test: the first holder's belief is not
			// ended by a refresh meanwhile.
			ttl := limiter.TTL(30 * time.Second)
			first, err := clientFor(t, f.Client(t), tc.opts...).Mutex("job", ttl)
			if err != nil {
				t.Fatal(err)
			}
			f.Link().Blackhole() // the replica gets nothing from now on
			l1, err1 := first.TryAcquire(ctx)
			f.KillMaster(t)

			second, _ := clientFor(t, f.Client(t)).Mutex("job", ttl)
			var l2 *limiter.Lease
			if err := retryFailover(func() (err error) { l2, err = second.TryAcquire(ctx); return err }); err != nil {
				t.Fatalf("the second Client after the failover: %v", err)
			}
			defer l2.Release(ctx)
			firstHolds := err1 == nil && l1.Err() == nil
			if tc.opts == nil {
				if !firstHolds {
					t.Fatalf("control: the first acquire should succeed and be lost in the failover; err %v", err1)
				}
				return
			}
			if firstHolds {
				t.Fatalf("two holders: the first Client holds lease %s (token %d) and the second was granted %s", l1.ID(), l1.Token(), l2.ID())
			}
			var re *limiter.ReplicationError
			if !errors.Is(err1, limiter.ErrNotReplicated) || !errors.As(err1, &re) || re.Acked != 0 || re.Want != 1 || re.Op != "acquire" {
				t.Fatalf("the unreplicated acquire: want a ReplicationError with 0 of 1 replicas, got %v", err1)
			}
		})
	}
}

// With replication healthy, a WaitReplicas acquire succeeds and survives
// the failover: the promoted replica has the lease and refuses a second
// holder. The new master has no replica left, so a refresh is no longer
// confirmed: it fails, and the lease stays held until its local deadline.
func TestWaitReplicasLeaseSurvivesFailover(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 30*time.Second)
	f := redistest.StartFailover(t)
	ttl := limiter.TTL(30 * time.Second)
	first, _ := clientFor(t, f.Client(t), limiter.WaitReplicas(1, time.Second)).Mutex("job", ttl)
	l1, err := first.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("acquire with the replica in sync: %v", err)
	}
	f.KillMaster(t)

	second, _ := clientFor(t, f.Client(t)).Mutex("job", ttl)
	err = retryFailover(func() error {
		l2, err := second.TryAcquire(ctx)
		if err == nil {
			l2.Release(ctx)
		}
		return err
	})
	if !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("a second Client after the failover: want ErrBusy, got %v", err)
	}
	hs, err := holders(ctx, second)
	if err != nil || len(hs) != 1 || hs[0].ID != l1.ID() || hs[0].Token != l1.Token() {
		t.Fatalf("holders on the promoted replica: %+v, %v; want lease %s token %d", hs, err, l1.ID(), l1.Token())
	}

	err = retryFailover(func() error { return l1.Refresh(ctx) })
	var re *limiter.ReplicationError
	if !errors.As(err, &re) || re.Op != "refresh" || re.Acked != 0 {
		t.Fatalf("a refresh on a master without replicas: want a ReplicationError, got %v", err)
	}
	if l1.Err() != nil {
		t.Fatalf("an unconfirmed refresh ended the lease before its deadline: %v", l1.Err())
	}
}

// A refresh that reached the master but no replica does not extend the
// local deadline: the lease is lost at it, though the master still has
// it (a failover would bring back the replica's older expiry).
func TestWaitReplicasUnconfirmedRefreshIsAFailure(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	f := redistest.StartFailover(t)
	rdb := f.Client(t)
	mu, _ := clientFor(t, rdb, limiter.WaitReplicas(1, 100*time.Millisecond), limiter.TTL(time.Second)).Mutex("job")
	l, err := mu.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.Link().Blackhole()
	select {
	case <-l.Context().Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the lease was kept alive by refreshes that no replica confirmed")
	}
	if !errors.Is(l.Err(), limiter.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", l.Err())
	}
	if hs, err := holders(ctx, mu); err != nil || len(hs) != 1 {
		t.Fatalf("the master should still hold the lease its refreshes extended: %+v, %v", hs, err)
	}
}

// With WaitReplicas a release wakes the waiter, which acquires itself,
// instead of granting it the lease in the release (a direct grant, whose
// replication the waiter could not confirm). A directly granted lease
// first lives only as long as the queue entry (3s); an acquired one its
// TTL.
func TestWaitReplicasWaiterAcquiresItself(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	f := redistest.StartFailover(t)
	opts := []limiter.Option{limiter.WaitReplicas(1, time.Second), limiter.TTL(20 * time.Second)}
	holder, _ := clientFor(t, f.Client(t), opts...).Mutex("job")
	waiter, _ := clientFor(t, f.Client(t), opts...).Mutex("job")
	l1, err := holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *limiter.Lease, 1)
	errs := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctx)
		if err != nil {
			errs <- err
			return
		}
		got <- l
	}()
	rdb := f.Master().Client(t)
	redistest.Eventually(t, 5*time.Second, "the waiter queued", func() bool { return rdb.ZCard(ctx, queueKey("job")).Val() == 1 })
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var l2 *limiter.Lease
	select {
	case l2 = <-got:
	case err := <-errs:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("the waiter was not granted the lease")
	}
	defer l2.Release(context.Background())
	hs, err := holders(ctx, waiter)
	if err != nil || len(hs) != 1 || hs[0].ID != l2.ID() {
		t.Fatalf("holders %+v, %v", hs, err)
	}
	if hs[0].TTL <= 5*time.Second {
		t.Fatalf("the waiter's lease lives %v in Redis: it was granted directly by the release, not acquired", hs[0].TTL)
	}
}

// A Resume (a handover) is a grant too: one that no replica confirmed is
// given back and reported, not returned.
func TestWaitReplicasUnconfirmedResume(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 30*time.Second)
	f := redistest.StartFailover(t)
	opts := []limiter.Option{limiter.WaitReplicas(1, 200*time.Millisecond), limiter.TTL(20 * time.Second)}
	from, _ := clientFor(t, f.Client(t), opts...).Mutex("job")
	to, _ := clientFor(t, f.Client(t), opts...).Mutex("job")
	l, err := from.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l.StopRefresh()
	f.Link().Blackhole()
	if l2, err := to.Resume(ctx, l.Ticket()); !errors.Is(err, limiter.ErrNotReplicated) {
		t.Fatalf("Resume with replication held back: want ErrNotReplicated, got %v (a lease: %t)", err, l2 != nil)
	}
	if hs, err := holders(ctx, to); err != nil || len(hs) != 0 {
		t.Fatalf("the unconfirmed Resume's lease should be given back: holders %+v, %v", hs, err)
	}
}

// On a Cluster the script and its WAIT go to the master of the name's
// slot, together. These masters have no replicas, so no grant is
// confirmed: it is given back, and only that node saw a WAIT.
func TestWaitReplicasOnACluster(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 30*time.Second)
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	const name = "job{a}}{b"
	mu, _ := clientFor(t, cc, limiter.WaitReplicas(1, 50*time.Millisecond)).Mutex(name)
	var re *limiter.ReplicationError
	if _, err := mu.TryAcquire(ctx); !errors.As(err, &re) || re.Acked != 0 || re.Connected != 0 {
		t.Fatalf("TryAcquire on masters without replicas: want a ReplicationError, got %v", err)
	}
	if hs, err := holders(ctx, mu); err != nil || len(hs) != 0 {
		t.Fatalf("the unconfirmed grant should be given back: %+v, %v", hs, err)
	}
	owner, err := cc.MasterForKey(ctx, "{job%7Ba%7D%7D%7Bb}") // the name's hash tag
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range cl.Servers() {
		calls := s.CommandCalls(t)
		scripts := redistest.Scripts(calls)
		if mine := s.Addr() == owner.Options().Addr; mine != (calls["wait"] > 0) || mine != (scripts > 0) {
			t.Errorf("node %s (owns the name: %t): %d WAIT, %d script calls", s.Addr(), mine, calls["wait"], scripts)
		}
	}
}

// deadCalls counts, per node address, the commands and pipelines a
// ClusterClient sent to that node's client, and the connections it
// dialled: how hard a process knocks on a dead master.
type deadCalls struct{ byAddr sync.Map } // addr -> *nodeCalls

type nodeCalls struct{ calls, dials atomic.Int64 }

func (d *deadCalls) count(addr string) *nodeCalls {
	n, _ := d.byAddr.LoadOrStore(addr, new(nodeCalls))
	return n.(*nodeCalls)
}

// watch adds a hook counting every call to each node client of cc.
func (d *deadCalls) watch(cc *redis.ClusterClient) {
	cc.OnNewNode(func(node *redis.Client) {
		node.AddHook(countHook{d.count(node.Options().Addr)})
	})
}

type countHook struct{ n *nodeCalls }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.n.dials.Add(1)
		return next(ctx, network, addr)
	}
}
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.calls.Add(1); return next(ctx, cmd) }
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.calls.Add(1); return next(ctx, cmds) }
}

// A master killed -9 refuses connections, which go-redis does not take as
// a reason to read the slot map again: without help, grants came back
// only at its next periodic reload, ~10 s after the kill. They must come
// back within seconds of the replica's promotion, and the dead address
// must not be hammered meanwhile.
func TestClusterMasterKilledGrantsResume(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []limiter.Option
	}{
		{"plain", nil},
		// The pipeline path (script + WAIT on the master's own client).
		// The promoted master has no replica: its answers must say so, and
		// the Client log it once.
		{"WaitReplicas", []limiter.Option{limiter.WaitReplicas(1, 200*time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var warns warnCounter
			few := testMasterKilled(t, append(tc.opts, limiter.Logger(slog.New(&warns)))...)
			if tc.opts == nil {
				return
			}
			if few == nil || few.Connected != 0 || few.Want != 1 {
				t.Errorf("after the promotion: want a ReplicationError saying 0 of 1 replicas are connected, got %v", few)
			}
			if n := warns.n.Load(); n != 1 {
				t.Errorf("logged the missing replicas %d times, want once", n)
			}
		})
	}
}

// warnCounter counts the Warn records about missing replicas.
type warnCounter struct{ n atomic.Int64 }

func (*warnCounter) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.Contains(r.Message, "too few replicas") {
		w.n.Add(1)
	}
	return nil
}
func (w *warnCounter) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnCounter) WithGroup(string) slog.Handler      { return w }

// testMasterKilled returns the first ReplicationError after the
// promotion, if any.
func testMasterKilled(t *testing.T, opts ...limiter.Option) *limiter.ReplicationError {
	ctx := ctxT(t, 60*time.Second)
	cl := redistest.StartClusterWithReplicas(t, 3)
	var calls deadCalls
	cc := cl.Client(t)
	calls.watch(cc)
	const name = "job"
	sem, err := clientFor(t, cc, append([]limiter.Option{limiter.TTL(30 * time.Second)}, opts...)...).Semaphore(name, 4)
	if err != nil {
		t.Fatal(err)
	}
	dead, err := cc.MasterForKey(ctx, "{"+name+"}")
	if err != nil {
		t.Fatal(err)
	}

	// The semaphore is full with leases held here, released after the
	// kill: their releases fail, and grants come back only when the
	// Client sends them again to the promoted master (Lease.resend), not
	// when they expire 30s later.
	held := make([]*limiter.Lease, 4)
	for i := range held {
		if held[i], err = sem.TryAcquire(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Four callers take and give back a permit, retrying failures after
	// 1 ms as a busy worker would. With WaitReplicas the promoted master
	// has no replica, so it answers with a ReplicationError, not a grant:
	// that answer is what comes back then.
	var lastGrant atomic.Int64 // unix ns of the last grant or answer
	var busy atomic.Bool       // Redis said full before the kill
	var promotedAt atomic.Int64
	var firstFew atomic.Pointer[limiter.ReplicationError]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := sem.TryAcquire(ctx)
				var re *limiter.ReplicationError
				if err == nil || errors.As(err, &re) {
					lastGrant.Store(time.Now().UnixNano())
				}
				if errors.Is(err, limiter.ErrBusy) {
					busy.Store(true)
				}
				if re != nil && promotedAt.Load() != 0 {
					firstFew.CompareAndSwap(nil, re)
				}
				if err != nil {
					time.Sleep(time.Millisecond)
					continue
				}
				_ = l.Release(ctx)
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	redistest.Eventually(t, 5*time.Second, "a full semaphore before the kill", busy.Load)

	deadNode := calls.count(dead.Options().Addr)
	killed, before, dialsBefore := time.Now(), deadNode.calls.Load(), deadNode.dials.Load()
	released := make(chan error, len(held))
	go func() {
		time.Sleep(300 * time.Millisecond) // dead; promoted after ~2s
		for _, l := range held {
			released <- l.Release(ctx)
		}
	}()
	_, promoted := cl.KillMaster(t, "{"+name+"}")
	if err := <-released; err == nil {
		t.Fatal("a release reached the master as it was killed: nothing here is resent")
	}
	promotedAt.Store(promoted.UnixNano())
	var resumed time.Time
	for end := promoted.Add(15 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if g := time.Unix(0, lastGrant.Load()); g.After(promoted) {
			resumed = g
			break
		}
	}
	deadCalls, dials := deadNode.calls.Load()-before, deadNode.dials.Load()-dialsBefore
	if resumed.IsZero() {
		t.Fatalf("no grant or answer within 15s of the promotion (%v after the kill); %d calls to the dead master", promoted.Sub(killed), deadCalls)
	}
	outage := resumed.Sub(killed)
	t.Logf("promoted %v after the kill; first grant or answer %v after the promotion; %d calls to the dead master (%.0f/s), %d dials (%.1f/s)",
		promoted.Sub(killed).Round(time.Millisecond), resumed.Sub(promoted).Round(time.Millisecond), deadCalls, float64(deadCalls)/outage.Seconds(),
		dials, float64(dials)/outage.Seconds())
	// How soon is a timing claim, measured here and logged above: runs
	// resume 0.05-0.6s after the promotion (go-redis' own reload: ~7.5s).
	// What this test asserts is that they come back long before the TTL
	// (30s): the leases whose release failed during the outage are
	// released as soon as the promoted master answers (Lease.resend), or
	// the semaphore stays full until they expire.
	// Hundreds a second (thousands with WaitReplicas) before the dead
	// node was left alone between tries; a few a second per try since.
	if rate := float64(deadCalls) / outage.Seconds(); rate > 100 {
		t.Errorf("%.0f calls a second to the dead master, want a few", rate)
	}
	return firstFew.Load()
}
