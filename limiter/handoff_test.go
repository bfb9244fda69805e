package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// A release after the fleet limit was cleared (no limit recorded) hands
// leases out within each waiter's own limit: a Mutex keeps one holder.
func TestHandoffAfterClearingTheFleetLimit(t *testing.T) {
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
	if err := mu.SetLimit(ctx, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the woken waiters try and queue again
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	hs, _ := mu.Holders(ctx)
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

// staleRounds bounds TestStaleHandoffAfterAPause (about 6s a round).
const staleRounds = 3

// A waiter frozen (SIGSTOP) across a handoff: the handed lease expires
// with its queue entry and another holder is granted. On resumption the
// waiter may ask again, and be answered "queued", before it reads the
// delayed handoff message: the token that answer carries shows the
// handoff stale, and the waiter must not run under it. Several names run
// in parallel per round (without the check, about 1 in 4 overlapped).
func TestStaleHandoffAfterAPause(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 170*time.Second)
	rdb := b.client(t)
	const parallel = 4
	for round := range staleRounds {
		type trial struct {
			name string
			mu   *limiter.Mutex
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
			if hs, _ := tr.mu.Holders(ctx); len(hs) != 1 {
				t.Fatalf("round %d: not handed over: %+v", round, hs)
			}
		}
		time.Sleep(3500 * time.Millisecond) // the handed leases expire with the entries
		for _, tr := range trials {
			var err error
			if tr.held, err = tr.mu.TryAcquire(ctx); err != nil {
				t.Fatalf("round %d: the handed lease did not expire: %v", round, err)
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

// A handoff to a waiter with a long TTL is usable: the drift allowance is
// that of the handed lease's short life, not of the TTL (5 minutes'
// allowance exceeded the 3s life, every handoff was given back and FIFO
// lost).
func TestHandoffWithALongTTL(t *testing.T) {
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

// A handoff checks the waiter against its own Semaphore's limit, as its
// acquire would: a limit-1 waiter is not granted while 2 permits of a
// limit-3 Semaphore are held.
func TestHandoffKeepsTheWaitersLimit(t *testing.T) {
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
		hs, _ := wide.Holders(ctx)
		t.Errorf("the limit-1 Semaphore was granted while %d permits are held (%d holders in all)", len(hs)-1, len(hs))
		_ = l.Release(ctx)
	case <-time.After(1500 * time.Millisecond):
	}
	_ = b.Release(ctx)
	_ = c.Release(ctx)
}

// A lease Acquire got by a handoff, which Redis keeps for a few seconds
// until its first refresh, still stays for its TTL after StopRefresh, as
// StopRefresh promises for a Ticket passed on (it expired within 3s).
func TestStopRefreshOfAHandedLease(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 60*time.Second)
	rdb := srv.Client(t)
	const name = "handed-stoprefresh"
	mu, _ := newMutex(t, rdb, name, limiter.TTL(30*time.Second))
	held, err := mu.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiter, _ := newMutex(t, srv.Client(t), name, limiter.TTL(30*time.Second), limiter.AcquireTimeout(0))
	got := make(chan *limiter.Lease, 1)
	go func() {
		l, err := waiter.Acquire(ctx)
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		l.StopRefresh() // e.g. to pass its Ticket to another process
		got <- l
	}()
	redistest.Eventually(t, 10*time.Second, "queued", func() bool { return rdb.ZCard(ctx, queueKey(name)).Val() == 1 })
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		return
	}
	tk := l.Ticket()
	time.Sleep(4 * time.Second) // far below the 30s TTL
	other, _ := newMutex(t, srv.Client(t), name, limiter.TTL(30*time.Second))
	r, err := other.Resume(ctx, tk)
	if err == nil {
		_ = r.Release(ctx)
		return
	}
	if errors.Is(err, limiter.ErrNotHeld) {
		t.Errorf("a lease acquired by Acquire with TTL 30s, StopRefresh'd at once, expired within 4s: Resume of its ticket: %v", err)
	} else {
		t.Fatal(err)
	}
	if x, err := other.TryAcquire(context.Background()); err == nil {
		t.Errorf("and another holder was granted the mutex (token %d) while the ticket's TTL had 26s left", x.Token())
		_ = x.Release(ctx)
	}
}
