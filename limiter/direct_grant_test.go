package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// A direct grant: a release that frees room for a queued waiter grants it
// its lease in the same script, and the waiter takes that lease instead of
// acquiring. (Handing a held lease to another process by its Ticket is the
// handover: handover_test.go. StopRefresh and Park: detach_test.go.)

// A release grants the head waiter its lease in the same script: the
// waiter, in another Client or in the releaser's own, sends no acquire of
// its own, and its lease, granted for the life of its queue entry, is
// refreshed to its TTL.
func TestReleaseGrantsTheLeaseDirectly(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 60*time.Second)
		rdb := b.client(t)
		holder, _ := newMutex(t, rdb, "direct", limiter.AcquireTimeout(0), limiter.TTL(10*time.Second))
		other, _ := newMutex(t, b.client(t), "direct", limiter.AcquireTimeout(0), limiter.TTL(10*time.Second))
		if l, err := holder.TryAcquire(ctx); err != nil || l.Release(ctx) != nil { // scripts loaded
			t.Fatal(err)
		}
		for _, c := range []struct {
			name   string
			waiter *limiter.Semaphore
			pubs   int64
		}{{"another Client", other, 1}, {"the releaser's Client", holder, 0}} {
			l, err := holder.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *limiter.Lease, 1)
			go func() {
				l, err := c.waiter.Acquire(ctx)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			redistest.Eventually(t, 10*time.Second, "the waiter queued", func() bool {
				return rdb.ZCard(ctx, queueKey("direct")).Val() == 1
			})
			b.reset(t)
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			next := <-got
			if next == nil {
				t.FailNow()
			}
			calls := b.calls(t)
			if scripts := redistest.Scripts(calls); scripts != 1 || redistest.Publishes(calls) != c.pubs {
				t.Fatalf("%s: the direct grant took %d script calls and %d PUBLISH, want the release alone and %d", c.name, scripts, redistest.Publishes(calls), c.pubs)
			}
			if next.Token() <= l.Token() || next.Err() != nil {
				t.Fatalf("%s: directly granted lease token %d after %d, err %v", c.name, next.Token(), l.Token(), next.Err())
			}
			redistest.Eventually(t, 5*time.Second, "the directly granted lease refreshed to its TTL", func() bool {
				exp := rdb.ZScore(ctx, limiter.DefaultPrefix+"{direct}:leases", next.ID()).Val()
				return time.Until(time.UnixMilli(int64(exp))) > 8*time.Second
			})
			if err := next.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A direct grant whose wake-up is lost is the waiter's own when it asks
// again, and one to a waiter that gave up meanwhile is given back by its
// leave.
func TestDirectGrantLostOrLeft(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 30*time.Second)
	sem, _ := newSemaphore(t, srv.Client(t), "lost-grant", 1, limiter.TTL(10*time.Second))
	for _, leaves := range []bool{false, true} {
		l, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ghost := fmt.Sprintf("ghost-%v", leaves)
		if granted, err := limiter.QueueForHandoff(ctx, sem, ghost); err != nil || granted {
			t.Fatalf("queueing %s: granted %v, %v", ghost, granted, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		hs, _ := holders(ctx, sem)
		if len(hs) != 1 || hs[0].ID != ghost {
			t.Fatalf("after the release: holders %+v, want %s (granted directly)", hs, ghost)
		}
		if !leaves {
			if granted, err := limiter.AcquireOnce(ctx, sem, ghost, ghost, false); err != nil || !granted {
				t.Fatalf("the waiter asking again after a lost wake-up: granted %v, %v", granted, err)
			}
			_ = sem.ReleaseTicket(ctx, limiter.Ticket{Name: "lost-grant", ID: ghost, Weight: 1, Token: hs[0].Token})
			continue
		}
		if err := limiter.Leave(ctx, sem, ghost); err != nil {
			t.Fatal(err)
		}
		if hs, _ := holders(ctx, sem); len(hs) != 0 {
			t.Fatalf("after the waiter left: holders %+v, want none", hs)
		}
	}
}

// A release after the fleet limit was cleared (no limit recorded) grants
// leases directly within each waiter's own limit: a Mutex keeps one
// holder.
func TestDirectGrantAfterClearingTheFleetLimit(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 60*time.Second)
	rdb := srv.Client(t)
	const name = "cleared"
	mu, _ := newMutex(t, rdb, name, limiter.TTL(10*time.Second), limiter.AcquireTimeout(0))
	held, err := mu.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	got := make(chan *limiter.Lease, n)
	for i := range n {
		// each waiter in a Client of its own (another process)
		w, _ := newMutex(t, srv.Client(t), name, limiter.TTL(10*time.Second), limiter.AcquireTimeout(0))
		go func() {
			l, err := w.Acquire(wctx)
			if err != nil {
				return // cancelled at the end: never granted
			}
			got <- l
		}()
		redistest.Eventually(t, 10*time.Second, fmt.Sprint("waiter ", i, " queued"), func() bool {
			return rdb.ZCard(ctx, queueKey(name)).Val() == int64(i+1)
		})
	}
	// An operator clears the fleet limit (none was even set).
	if err := inspect.New(clientFor(t, rdb)).SetLimit(ctx, name, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the woken waiters try and queue again
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	hs, _ := holders(ctx, mu)
	var mine []*limiter.Lease
	for len(mine) < n {
		select {
		case l := <-got:
			mine = append(mine, l)
			continue
		case <-time.After(200 * time.Millisecond):
		}
		break
	}
	for _, l := range mine {
		if l != nil {
			defer l.Release(ctx)
		}
	}
	if len(hs) > 1 || len(mine) > 1 {
		t.Fatalf("a Mutex after SetLimit(0) and one release: %d holders in Redis, %d Acquire calls returned a lease", len(hs), len(mine))
	}
}

// staleRounds bounds TestStaleDirectGrantAfterAPause (about 6s a round).
const staleRounds = 3

// A waiter frozen (SIGSTOP) across a direct grant: the granted lease
// expires with its queue entry and another holder is granted. On
// resumption the waiter may ask again, and be answered "queued", before
// it reads the delayed grant message: the token that answer carries shows
// the grant stale, and the waiter must not run under it. Several names run
// in parallel per round (without the check, about 1 in 4 overlapped).
func TestStaleDirectGrantAfterAPause(t *testing.T) {
	t.Parallel()
	b := singleBackend(t)
	ctx := ctxT(t, 170*time.Second)
	rdb := b.client(t)
	const parallel = 4
	for round := range staleRounds {
		type trial struct {
			name string
			mu   *limiter.Semaphore
			held *limiter.Lease
			w    *exec.Cmd
		}
		var trials []*trial
		for range parallel {
			tr := &trial{name: uniqueName(b, "stale")}
			tr.mu, _ = newMutex(t, rdb, tr.name)
			var err error
			if tr.held, err = tr.mu.TryAcquire(ctx); err != nil {
				t.Fatal(err)
			}
			tr.w = startWaiters(t, b, tr.name, "w", 1, 4000)
			trials = append(trials, tr)
		}
		for _, tr := range trials {
			redistest.Eventually(t, 20*time.Second, "queued", func() bool { return rdb.ZCard(ctx, queueKey(tr.name)).Val() == 1 })
		}
		time.Sleep(time.Duration(round%4) * 300 * time.Millisecond) // vary the keep-alive phase
		for _, tr := range trials {
			redistest.Freeze(t, tr.w.Process) // stopped before the release, not during what follows
			if err := tr.held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if hs, _ := holders(ctx, tr.mu); len(hs) != 1 {
				t.Fatalf("round %d: not granted directly: %+v", round, hs)
			}
		}
		time.Sleep(3500 * time.Millisecond) // the granted leases expire with the entries
		for _, tr := range trials {
			var err error
			if tr.held, err = tr.mu.TryAcquire(ctx); err != nil {
				t.Fatalf("round %d: the directly granted lease did not expire: %v", round, err)
			}
		}
		for _, tr := range trials {
			_ = tr.w.Process.Signal(syscall.SIGCONT)
		}
		time.Sleep(1500 * time.Millisecond)
		bad := 0
		for _, tr := range trials {
			order := rdb.LRange(ctx, "order:{"+tr.name+"}", 0, -1).Val()
			if len(order) > 0 && tr.held.Err() == nil {
				bad++
				t.Errorf("round %d %s: the resumed waiter ran under a lease while this process held the mutex (token %d): two holders", round, tr.name, tr.held.Token())
			}
			_ = tr.held.Release(ctx)
			_ = tr.w.Process.Kill()
		}
		if bad > 0 {
			return
		}
		t.Logf("round %d: no overlap", round)
	}
}

// A direct grant to a waiter with a long TTL is usable: the drift
// allowance is that of the granted lease's short life, not of the TTL (5
// minutes' allowance exceeded the 3s life, every direct grant was given
// back and FIFO lost).
func TestDirectGrantWithALongTTL(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 60*time.Second)
	rdb := srv.Client(t)
	const name = "longttl"
	mu, _ := newMutex(t, rdb, name, limiter.TTL(10*time.Second))
	held, err := mu.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 2)
	for _, w := range []struct {
		tag string
		ttl time.Duration
	}{{"first (TTL 5m)", 5 * time.Minute}, {"second (TTL 10s)", 10 * time.Second}} {
		m, _ := newMutex(t, srv.Client(t), name, limiter.TTL(w.ttl), limiter.AcquireTimeout(0))
		go func() {
			l, err := m.Acquire(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			order <- w.tag
			time.Sleep(200 * time.Millisecond)
			_ = l.Release(ctx)
		}()
		n := rdb.ZCard(ctx, queueKey(name)).Val() + 1
		redistest.Eventually(t, 10*time.Second, w.tag+" queued", func() bool { return rdb.ZCard(ctx, queueKey(name)).Val() == n })
	}
	srv.ResetStats(t)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	first, second := <-order, <-order
	calls := srv.CommandCalls(t)
	t.Logf("grant order: %s, then %s; %d script calls", first, second, redistest.Scripts(calls))
	if first != "first (TTL 5m)" {
		t.Fatalf("FIFO broken: %s was granted before %s, which queued first", first, second)
	}
}

// A direct grant checks the waiter against its own Semaphore's limit, as
// its acquire would: a limit-1 waiter is not granted while 2 permits of a
// limit-3 Semaphore are held.
func TestDirectGrantKeepsTheWaitersLimit(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 30*time.Second)
	rdb := srv.Client(t)
	const name = "mixedlimit"
	wide, _ := newSemaphore(t, rdb, name, 3)
	a, err := wide.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := wide.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := wide.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	narrow, _ := newSemaphore(t, srv.Client(t), name, 1, limiter.AcquireTimeout(0))
	got := make(chan *limiter.Lease, 1)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		l, err := narrow.Acquire(wctx)
		if err != nil {
			return // cancelled at the end: never granted
		}
		got <- l
	}()
	redistest.Eventually(t, 10*time.Second, "queued", func() bool { return rdb.ZCard(ctx, queueKey(name)).Val() == 1 })
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		hs, _ := holders(ctx, wide)
		t.Errorf("the limit-1 Semaphore was granted while %d permits are held (%d holders in all)", len(hs)-1, len(hs))
		_ = l.Release(ctx)
	case <-time.After(1500 * time.Millisecond):
	}
	_ = b.Release(ctx)
	_ = c.Release(ctx)
}

// A lease id made of the caller's prefix and the Client's own id (IDPrefix)
// is granted directly, as a made-up one is: the waiter sends one acquire,
// which queues it, and the release grants it the lease under its named
// id. A caller-given id (ID) cannot be: it may be asked for twice. A
// prefix with a space is refused: wake-up messages are split at spaces.
func TestIDPrefixIsGrantedDirectly(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 30*time.Second)
	rdb := b.client(t)
	holder, _ := newMutex(t, rdb, "prefixed", limiter.AcquireTimeout(0), limiter.TTL(10*time.Second))
	waiter, _ := newMutex(t, b.client(t), "prefixed", limiter.AcquireTimeout(0), limiter.TTL(10*time.Second))
	l, err := holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.reset(t)
	got := make(chan *limiter.Lease, 1)
	go func() {
		l, err := waiter.Acquire(ctx, limiter.IDPrefix("default:task-7:0:"))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	redistest.Eventually(t, 10*time.Second, "the waiter queued", func() bool {
		return rdb.ZCard(ctx, queueKey("prefixed")).Val() == 1
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-got
	if next == nil {
		t.FailNow()
	}
	defer next.Release(ctx)
	if scripts := redistest.Scripts(b.calls(t)); scripts != 2 {
		t.Fatalf("%d script calls, want 2: the waiter's acquire that queued it and the release that granted it", scripts)
	}
	if !strings.HasPrefix(next.ID(), "default:task-7:0:") || len(next.ID()) == len("default:task-7:0:") {
		t.Fatalf("lease id %q, want the prefix and a made-up part", next.ID())
	}
	_, err = waiter.TryAcquire(ctx, limiter.IDPrefix("a task:"))
	var ae *limiter.ArgumentError
	if !errors.As(err, &ae) || ae.Arg != "IDPrefix" {
		t.Fatalf("a prefix with a space: %v, want an *ArgumentError naming IDPrefix", err)
	}
}
