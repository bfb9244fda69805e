package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// Detaching a lease from its holder's process: StopRefresh stops keeping
// it alive here (its Ticket goes elsewhere) and Park leaves it in Redis
// held by nobody until a Resume. (The handover itself:
// handover_test.go.)

// A lease Acquire got by a direct grant, which Redis keeps for a few
// seconds until its first refresh, still stays for its TTL after
// StopRefresh, as StopRefresh promises for a Ticket passed on (it expired
// within 3s).
func TestStopRefreshOfADirectlyGrantedLease(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 60*time.Second)
	rdb := srv.Client(t)
	const name = "granted-stoprefresh"
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

// A parked lease keeps its permits with no holder; the first Resume of
// any ticket of its id takes it over with a higher token, a second one and
// the parker's own Release cannot touch it, and unresumed it ends at its
// ttl.
func TestPark(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 30*time.Second)
		name := uniqueName(b, "park")
		first, _ := newSemaphore(t, b.client(t), name, 1)
		l, err := first.TryAcquire(ctx, limiter.ID("task-1"))
		if err != nil {
			t.Fatal(err)
		}
		stale := l.Ticket() // what the retry's headers carry
		// Handed over once, as the scheduler's first run adopts it.
		l.StopRefresh()
		adopted, err := first.Resume(ctx, stale)
		if err != nil {
			t.Fatal(err)
		}
		if err := adopted.Park(ctx, 5*time.Second); err != nil {
			t.Fatal("Park:", err)
		}
		if !errors.Is(adopted.Err(), limiter.ErrNotHeld) || errors.Is(adopted.Err(), limiter.ErrLeaseLost) {
			t.Fatalf("a parked Lease's Err: %v, want ErrNotHeld", adopted.Err())
		}
		if err := adopted.Release(ctx); !errors.Is(err, limiter.ErrNotHeld) {
			t.Fatalf("Release after Park: %v, want ErrNotHeld", err)
		}
		if _, err := first.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
			t.Fatalf("a parked lease keeps its permit: %v, want ErrBusy", err)
		}

		// Another process resumes it by the ticket it knows, whose token is
		// two incarnations old.
		other, _ := newSemaphore(t, b.client(t), name, 1, limiter.TTL(3*time.Second))
		retry, err := other.Resume(ctx, stale)
		if err != nil {
			t.Fatal("Resume of a parked lease:", err)
		}
		if retry.Token() <= adopted.Token() {
			t.Fatalf("resumed token %d, not above %d", retry.Token(), adopted.Token())
		}
		if _, err := other.Resume(ctx, stale); !errors.Is(err, limiter.ErrNotHeld) {
			t.Fatalf("a second Resume of a parked lease: %v, want ErrNotHeld", err)
		}
		// Parking needs the token: the stale Lease cannot park it again.
		if err := l.Park(ctx, time.Second); err == nil {
			t.Fatal("a stale Lease parked a lease it no longer holds")
		}

		// Parked and never resumed, it ends at its ttl.
		if err := retry.Park(ctx, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		redistest.Eventually(t, 5*time.Second, "the parked lease's permit comes back", func() bool {
			n, err := available(ctx, other)
			return err == nil && n == 1
		})
		if _, err := other.Resume(ctx, stale); !errors.Is(err, limiter.ErrNotHeld) {
			t.Fatalf("Resume after the parked lease ended: %v, want ErrNotHeld", err)
		}
	})
}

// Park with a ttl <= 0 or a nil ctx: an ArgumentError, and the lease is
// still held.
func TestParkBadArgumentsKeepTheLease(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 10*time.Second)
	mu, _ := newMutex(t, srv.Client(t), "live")
	l, err := mu.TryAcquire(ctx, limiter.ID("x"))
	if err != nil {
		t.Fatal(err)
	}
	var arg *limiter.ArgumentError
	if err := l.Park(ctx, 0); !errors.As(err, &arg) {
		t.Fatalf("Park(0): %v, want an ArgumentError", err)
	}
	if err := l.Park(nil, time.Second); !errors.As(err, &arg) { //nolint:staticcheck // on purpose
		t.Fatalf("Park(nil ctx): %v, want an ArgumentError", err)
	}
	if l.Err() != nil {
		t.Fatalf("bad arguments ended the lease: %v", l.Err())
	}
}

// On a quorum too: parked on every node, resumed by a ticket of its id.
func TestParkOnRedlock(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 20*time.Second)
	sem, err := newRedlockSemaphore(t, q.nodes, "park", 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := sem.TryAcquire(ctx, limiter.ID("task-1"))
	if err != nil {
		t.Fatal(err)
	}
	stale := l.Ticket()
	stale.Token-- // an older incarnation's ticket
	if err := l.Park(ctx, 5*time.Second); err != nil {
		t.Fatal("Park:", err)
	}
	other, _ := newRedlockSemaphore(t, q.nodes, "park", 1)
	if _, err := other.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("a parked lease keeps its permit: %v, want ErrBusy", err)
	}
	resumed, err := other.Resume(ctx, stale)
	if err != nil {
		t.Fatal("Resume of a parked lease:", err)
	}
	if resumed.Token() <= l.Token() {
		t.Fatalf("resumed token %d, not above %d", resumed.Token(), l.Token())
	}
	if err := resumed.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A Park whose reply is lost has still ended the Lease: had it stayed
// live, whoever resumed the parked lease would hold it beside it.
func TestParkReplyLost(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 30*time.Second)
	sem, _ := newSemaphore(t, srv.Client(t), "parklost", 2, limiter.TTL(30*time.Second))
	l, err := sem.TryAcquire(ctx, limiter.ID("x"))
	if err != nil {
		t.Fatal(err)
	}
	warm, err := sem.TryAcquire(ctx, limiter.ID("warm")) // loads the script: no NOSCRIPT while paused
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Park(ctx, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	perr := l.Park(pctx, 10*time.Second) // lands once the server resumes
	cancel()
	srv.Resume(t)
	if perr == nil {
		t.Fatal("Park answered by a paused server")
	}
	other, _ := newSemaphore(t, srv.Client(t), "parklost", 2)
	stale := l.Ticket()
	stale.Token = 1
	redistest.Eventually(t, 5*time.Second, "the park lands", func() bool {
		r, err := other.Resume(ctx, stale)
		if err == nil {
			_ = r.Release(ctx)
		}
		return err == nil
	})
	if l.Err() == nil {
		t.Fatal("two holders: the parker's Lease is live after its Park failed, and another process resumed the lease")
	}
}

// A Resume that lands between a quorum Park's scripts and its token
// write-back keeps its lease: the write-back goes only over the park's
// own grant on each node.
func TestResumeDuringParkWriteBack(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 120*time.Second)
	resumed := 0
	for trial := 0; trial < 40 && resumed < 5; trial++ {
		// A name per trial: a trial whose Resumes split the nodes leaves
		// its lease parked there until the park's ttl.
		name := fmt.Sprintf("wb%d", trial)
		parker, _ := newRedlockSemaphore(t, q.nodes, name, 1, limiter.TTL(3*time.Second))
		taker, _ := newRedlockSemaphore(t, q.nodes, name, 1, limiter.TTL(3*time.Second))
		l, err := parker.TryAcquire(ctx, limiter.ID("task"))
		if err != nil {
			t.Fatal(err)
		}
		// Node 2's counter ahead: the nodes' park tokens differ, so the
		// park writes the quorum's token back on nodes 0 and 1.
		q.nodes[2].HSet(ctx, "redsem:{"+name+"}:state", "token", time.Now().UnixMicro()+300000)
		ticket := l.Ticket()
		ticket.Token-- // any ticket takes a parked lease
		done := make(chan *limiter.Lease, 1)
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		go func() {
			for {
				r, err := taker.Resume(rctx, ticket)
				if err == nil || rctx.Err() != nil {
					done <- r
					return
				}
			}
		}()
		if err := l.Park(ctx, 10*time.Second); err != nil {
			t.Logf("trial %d: Park: %v", trial, err) // the taker may have split it
		}
		r := <-done
		cancel()
		if r == nil {
			continue
		}
		resumed++
		if err := r.Refresh(ctx); err != nil {
			t.Fatalf("trial %d: a successful Resume (token %d) lost its lease at its first refresh: %v", trial, r.Token(), err)
		}
		_ = r.Release(ctx)
	}
	if resumed == 0 {
		t.Fatal("no Resume won: the test proves nothing")
	}
}
