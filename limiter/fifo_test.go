package limiter_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/internal/scriptcall"
)

// A release with many waiters in several Clients wakes one of them: one
// PUBLISH and one acquire attempt, not one per Client; the waiters cost
// nothing while the holder holds on but their batched keep-alive.
func TestOneWakePerRelease(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 60*time.Second)
	const clients, perClient = 4, 10
	holder, _ := newMutex(t, srv.Client(t), "wake")
	l, err := holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *limiter.Lease, clients*perClient)
	var wg sync.WaitGroup
	for range clients {
		m, _ := newMutex(t, srv.Client(t), "wake", limiter.AcquireTimeout(0))
		for range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := m.Acquire(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				got <- l
			}()
		}
	}
	rdb := srv.Client(t)
	redistest.Eventually(t, 10*time.Second, "every waiter queued", func() bool {
		n, _ := rdb.ZCard(ctx, queueKey("wake")).Result()
		return n == clients*perClient
	})
	awaitRecorded(t, rdb, "wake", clients+1)
	srv.ResetStats(t)
	time.Sleep(1500 * time.Millisecond) // a keep-alive round, nothing else
	idle := srv.CommandCalls(t)
	if scripts := redistest.Scripts(idle); scripts > 2*clients {
		t.Fatalf("%d script calls in 1.5s while %d waiters wait on a held mutex; want only the keep-alive (~1 per Client)", scripts, clients*perClient)
	}
	srv.ResetStats(t)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-got
	time.Sleep(200 * time.Millisecond) // any spurious wake-up would act now
	calls := srv.CommandCalls(t)
	// Scripts: the release, the head's acquire, and at most one keep-alive
	// per Client that happened to fall due meanwhile.
	if redistest.Publishes(calls) > 1 || redistest.Scripts(calls) > 2+clients {
		t.Fatalf("one release with %d waiters: %d PUBLISH, %d script calls; want 1 and 2 (release, the head's acquire) plus keep-alives",
			clients*perClient, redistest.Publishes(calls), redistest.Scripts(calls))
	}
	// Drain: each release grants exactly the next waiter.
	for range clients*perClient - 1 {
		if err := next.Release(ctx); err != nil {
			t.Fatal(err)
		}
		next = <-got
	}
	_ = next.Release(ctx)
	wg.Wait()
}

// A waiter that gives up passes its turn on at once: the one behind it, in
// the same Client, is granted without waiting for a fallback timer.
func TestLeaverPassesItsTurnOn(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 20*time.Second)
		rdb := b.client(t)
		sem, _ := newSemaphore(t, rdb, uniqueName(b, "leaver"), 2, limiter.AcquireTimeout(0))
		first, err := sem.Acquire(ctx, limiter.Weight(2))
		if err != nil {
			t.Fatal(err)
		}
		heavyCtx, leave := context.WithCancel(ctx)
		heavy := make(chan error, 1)
		go func() {
			l, err := sem.Acquire(heavyCtx, limiter.Weight(2))
			if err == nil {
				err = l.Release(ctx)
			}
			heavy <- err
		}()
		time.Sleep(100 * time.Millisecond) // the heavy waiter heads the queue
		light := make(chan *limiter.Lease, 1)
		go func() {
			l, err := sem.Acquire(ctx)
			if err != nil {
				t.Error(err)
			}
			light <- l
		}()
		time.Sleep(100 * time.Millisecond)
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// The release woke the heavy head; it leaves instead of taking
		// the permits, and the light one behind must get in now.
		leave()
		if err := <-heavy; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		start := time.Now()
		select {
		case l := <-light:
			if took := time.Since(start); took > time.Second {
				t.Fatalf("the waiter behind a leaver took %v", took)
			}
			_ = l.Release(ctx)
		case <-time.After(1500 * time.Millisecond):
			t.Fatal("the waiter behind a leaver waited for a fallback")
		}
	})
}

// The queue key, made anew whenever the queue had emptied, expires like
// the others: a queue left behind by crashed waiters must not live forever.
func TestQueueKeyExpires(t *testing.T) {
	b := singleBackend(t)
	rdb := b.client(t)
	ctx := ctxT(t, 10*time.Second)
	mu, _ := newMutex(t, rdb, "qkey", limiter.TTL(10*time.Second))
	held, err := mu.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, _ = mu.Acquire(wctx) }()
	redistest.Eventually(t, 5*time.Second, "the waiter queued", func() bool {
		return rdb.Exists(ctx, "redsem:{qkey}:queue").Val() == 1
	})
	if ttl := rdb.PTTL(ctx, "redsem:{qkey}:queue").Val(); ttl <= 0 {
		t.Fatalf("queue key PTTL %v: it would live forever", ttl)
	}
	_ = held.Release(ctx)
}

// lostReply lets Redis run the next waiting acquire (one that may queue)
// but loses its reply, as a connection reset after the write would.
type lostReply struct{ armed atomic.Bool }

func (h *lostReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lostReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *lostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		// ARGV[8] is the wait id.
		if argv, ok := scriptcall.Args("acquire", cmd.Args()); ok && argv[7] != "" && h.armed.CompareAndSwap(true, false) {
			_ = next(ctx, cmd)
			cmd.SetErr(errors.New("reply lost"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

// An Acquire whose attempt failed without an answer leaves the queue the
// attempt may have put it in, rather than holding up those behind it for
// the entry's life (3s).
func TestFailedAttemptLeavesTheQueue(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 30*time.Second)
	rdb := srv.Client(t)
	holder, _ := newMutex(t, rdb, "lost-queued")
	l, err := holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	flaky := srv.Client(t)
	hook := &lostReply{}
	flaky.AddHook(hook)
	waiter, _ := newMutex(t, flaky, "lost-queued")
	hook.armed.Store(true)
	if _, err := waiter.Acquire(ctx); err == nil || hook.armed.Load() {
		t.Fatalf("Acquire with its reply lost: %v (the reply was lost: %v)", err, !hook.armed.Load())
	}
	redistest.Eventually(t, time.Second, "the entry left the queue", func() bool {
		return rdb.ZCard(ctx, queueKey("lost-queued")).Val() == 0
	})
}
