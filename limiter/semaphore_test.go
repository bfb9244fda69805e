package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

func TestCore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		t.Run("TryAcquireAndRelease", func(t *testing.T) { testTryAcquire(t, b) })
		t.Run("WeightedLeases", func(t *testing.T) { testWeighted(t, b) })
		t.Run("LimitHoldsInProcess", func(t *testing.T) { testLimitInProcess(t, b) })
		t.Run("MixedTTLs", func(t *testing.T) { testMixedTTLs(t, b) })
		t.Run("LossWhenKeysDeleted", func(t *testing.T) { testLossWhenDeleted(t, b) })
		t.Run("Handover", func(t *testing.T) { testHandover(t, b) })
		t.Run("OneHolderPerID", func(t *testing.T) { testOneHolderPerID(t, b) })
		t.Run("SameIDKeepsTheHoldersExpiry", func(t *testing.T) { testSameIDKeepsTheHoldersExpiry(t, b) })
		t.Run("FencingTokens", func(t *testing.T) { testFencing(t, b) })
		t.Run("FencingAcrossIdleExpiry", func(t *testing.T) { testFencingIdle(t, b) })
		t.Run("WaitingCostsNothing", func(t *testing.T) { testWaitingIsQuiet(t, b) })
		t.Run("Do", func(t *testing.T) { testDo(t, b) })
		t.Run("AcquireTimeoutAndCancel", func(t *testing.T) { testAcquireGivesUp(t, b) })
		t.Run("ExpiredLeasesFreePermits", func(t *testing.T) { testExpiry(t, b) })
		t.Run("ArrivalOrderWithinProcess", func(t *testing.T) { testArrivalOrder(t, b) })
		t.Run("HeavyWaiterNotStarved", func(t *testing.T) { testHeavyWaiterNotStarved(t, b) })
		t.Run("DoReleasesOnPanic", func(t *testing.T) { testDoPanic(t, b) })
		t.Run("ResumeAppliesTheAdoptersTTL", func(t *testing.T) { testResumeAppliesTheAdoptersTTL(t, b) })
	})
}

func testTryAcquire(t *testing.T, b backend) {
	rdb := b.client(t)
	ctx := ctxT(t, 10*time.Second)
	sem, err := newSemaphore(t, rdb, uniqueName(b, "try"), 2)
	if err != nil {
		t.Fatal(err)
	}
	l1, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sem.TryAcquire(ctx)
	var busy *limiter.BusyError
	if !errors.Is(err, limiter.ErrBusy) || !errors.As(err, &busy) || errors.Is(err, limiter.ErrTimeout) {
		t.Fatalf("third TryAcquire: want ErrBusy (not ErrTimeout), got %v", err)
	}
	if busy.InUse != 2 || busy.RetryIn <= 0 || busy.RetryIn > limiter.DefaultTTL {
		t.Fatalf("busy error details: %+v", busy)
	}
	if l1.ID() == l2.ID() || l1.Token() >= l2.Token() {
		t.Fatalf("leases: %s/%d then %s/%d", l1.ID(), l1.Token(), l2.ID(), l2.Token())
	}
	if n, err := available(ctx, sem); err != nil || n != 0 {
		t.Fatalf("Available = %d, %v; want 0", n, err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l1.Context().Done():
	default:
		t.Fatal("Done not closed after Release")
	}
	if !errors.Is(l1.Err(), limiter.ErrNotHeld) || !errors.Is(context.Cause(l1.Context()), limiter.ErrNotHeld) {
		t.Fatalf("after Release: Err=%v cause=%v", l1.Err(), context.Cause(l1.Context()))
	}
	if err := l1.Release(ctx); !errors.Is(err, limiter.ErrNotHeld) {
		t.Fatalf("second Release: want ErrNotHeld, got %v", err)
	}
	hs, err := holders(ctx, sem)
	if err != nil || len(hs) != 1 || hs[0].ID != l2.ID() || hs[0].Token != l2.Token() {
		t.Fatalf("Holders = %+v, %v", hs, err)
	}
	if _, err := sem.TryAcquire(ctx); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

func testWeighted(t *testing.T, b backend) {
	rdb := b.client(t)
	ctx := ctxT(t, 10*time.Second)
	sem, err := newSemaphore(t, rdb, uniqueName(b, "weighted"), 5)
	if err != nil {
		t.Fatal(err)
	}
	big, err := sem.TryAcquire(ctx, limiter.Weight(4))
	if err != nil {
		t.Fatal(err)
	}
	if big.Weight() != 4 {
		t.Fatalf("Weight = %d", big.Weight())
	}
	if _, err := sem.TryAcquire(ctx, limiter.Weight(2)); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("weight 2 over 4/5: want ErrBusy, got %v", err)
	}
	small, err := sem.TryAcquire(ctx, limiter.Weight(1))
	if err != nil {
		t.Fatal(err)
	}
	hs, _ := holders(ctx, sem)
	if len(hs) != 2 {
		t.Fatalf("one member per lease, whatever its weight: %+v", hs)
	}
	if err := big.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := available(ctx, sem); n != 4 {
		t.Fatalf("Available = %d, want 4", n)
	}
	_ = small.Release(ctx)
}

// Many goroutines of one process; an independent counter checks the cap.
func testLimitInProcess(t *testing.T, b backend) {
	rdb := b.client(t)
	const limit, workers, rounds = 3, 16, 15
	sem, err := newSemaphore(t, rdb, uniqueName(b, "inproc"), limit)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu          sync.Mutex
		inside, top int
		wg          sync.WaitGroup
	)
	ctx := ctxT(t, 60*time.Second)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				err := sem.Do(ctx, func(context.Context) error {
					mu.Lock()
					inside++
					top = max(top, inside)
					mu.Unlock()
					time.Sleep(time.Millisecond)
					mu.Lock()
					inside--
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if top > limit || top < 2 {
		t.Fatalf("peak holders %d with limit %d", top, limit)
	}
}

func testMixedTTLs(t *testing.T, b backend) {
	rdb := b.client(t)
	ctx := ctxT(t, 20*time.Second)
	name := uniqueName(b, "mixed")
	long, err := newSemaphore(t, rdb, name, 2, limiter.TTL(30*time.Second), limiter.RefreshInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	short, err := newSemaphore(t, rdb, name, 2, limiter.TTL(200*time.Millisecond), limiter.RefreshInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	holder, err := long.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Short holders come and go for well over their TTL; half of them are
	// never released and must simply expire.
	for i := 0; i < 10; i++ {
		l, err := short.Acquire(ctx)
		if err != nil {
			t.Fatalf("short holder %d: %v", i, err)
		}
		if _, err := short.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
			t.Fatalf("limit 2 with the long holder and one short: want busy, got %v", err)
		}
		if i%2 == 0 {
			_ = l.Release(ctx)
		}
		time.Sleep(50 * time.Millisecond)
	}
	hs, err := holders(ctx, long)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, h := range hs {
		if h.ID == holder.ID() {
			found = h.TTL > 25*time.Second
		}
	}
	if !found || holder.Err() != nil {
		t.Fatalf("the 30s holder was evicted: holders %+v, err %v", hs, holder.Err())
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func testLossWhenDeleted(t *testing.T, b backend) {
	rdb := b.client(t)
	ctx := ctxT(t, 10*time.Second)
	prefix := fmt.Sprintf("loss%d:", nameSeq.Add(1))
	lostCh := make(chan error, 1)
	sem, err := redistest.Limiter(t, rdb, limiter.Prefix(prefix)).Semaphore(uniqueName(b, "loss"), 1,
		limiter.TTL(time.Second), limiter.RefreshInterval(50*time.Millisecond),
		limiter.OnLost(func(_ *limiter.Lease, err error) { lostCh <- err }))
	if err != nil {
		t.Fatal(err)
	}
	l, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys := keysMatching(t, rdb, prefix+"*")
	if len(keys) != 2 {
		t.Fatalf("keys of a held semaphore: %v", keys)
	}
	for _, k := range keys {
		if err := rdb.Del(ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-l.Context().Done():
	case <-ctx.Done():
		t.Fatal("Done did not close after the keys were deleted")
	}
	if !errors.Is(context.Cause(l.Context()), limiter.ErrLeaseLost) || !errors.Is(l.Err(), limiter.ErrLeaseLost) {
		t.Fatalf("cause %v, err %v", context.Cause(l.Context()), l.Err())
	}
	if err := <-lostCh; !errors.Is(err, limiter.ErrLeaseLost) {
		t.Fatalf("OnLost got %v", err)
	}
	if err := l.Refresh(ctx); !errors.Is(err, limiter.ErrLeaseLost) {
		t.Fatalf("Refresh after loss: %v", err)
	}
	if err := l.Release(ctx); !errors.Is(err, limiter.ErrNotHeld) {
		t.Fatalf("Release after loss: %v", err)
	}
}

// One id, one holder: a second acquisition with a live lease's id waits
// its turn, in this Client or another; another weight is an error.
func testOneHolderPerID(t *testing.T, b backend) {
	ctx := ctxT(t, 10*time.Second)
	name := uniqueName(b, "idem")
	sem, err := newSemaphore(t, b.client(t), name, 3)
	if err != nil {
		t.Fatal(err)
	}
	other, err := newSemaphore(t, b.client(t), name, 3) // another process
	if err != nil {
		t.Fatal(err)
	}
	a, err := sem.Acquire(ctx, limiter.ID("task-42"), limiter.Weight(2))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*limiter.Semaphore{sem, other} {
		if _, err := s.TryAcquire(ctx, limiter.ID("task-42"), limiter.Weight(2)); !errors.Is(err, limiter.ErrBusy) {
			t.Fatalf("a second holder of one id: %v, want ErrBusy", err)
		}
	}
	var arg *limiter.ArgumentError
	if _, err := other.TryAcquire(ctx, limiter.ID("task-42"), limiter.Weight(1)); !errors.As(err, &arg) || arg.Arg != "Weight" {
		t.Fatalf("same id, other weight: %v, want an ArgumentError for Weight", err)
	}
	if n, _ := available(ctx, sem); n != 1 {
		t.Fatalf("available %d, want 1", n)
	}
	waited := make(chan *limiter.Lease, 1)
	go func() {
		l, err := other.Acquire(ctx, limiter.ID("task-42"), limiter.Weight(2))
		if err != nil {
			t.Error(err)
		}
		waited <- l
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case <-waited:
		t.Fatal("the second holder of an id did not wait for the first")
	default:
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-waited
	if l == nil || l.Token() <= a.Token() {
		t.Fatalf("the waiter's lease %v must be newer than %d", l, a.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := available(ctx, sem); n != 3 {
		t.Fatalf("available %d after release, want 3", n)
	}
}

// A holder of the same id with a shorter TTL, in another Client, can
// neither share the lease nor cut the expiry its holder was promised.
func testSameIDKeepsTheHoldersExpiry(t *testing.T, b backend) {
	ctx := ctxT(t, 10*time.Second)
	name := uniqueName(b, "shorten")
	long, _ := newMutex(t, b.client(t), name, limiter.TTL(10*time.Second), limiter.RefreshInterval(0))
	short, _ := newMutex(t, b.client(t), name, limiter.TTL(time.Second), limiter.RefreshInterval(0))
	l, err := long.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := short.TryAcquire(ctx, limiter.ID(l.ID())); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("same id from another holder: %v, want ErrBusy", err)
	}
	hs, _ := holders(ctx, long)
	if len(hs) != 1 || hs[0].TTL < 9*time.Second {
		t.Fatalf("the expiry was shortened by a same-id attempt with a 1s TTL: %+v", hs)
	}
	if err := l.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	hs, _ = holders(ctx, long)
	if len(hs) != 1 || hs[0].TTL < 9*time.Second {
		t.Fatalf("the expiry was shortened: %+v", hs)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func testFencing(t *testing.T, b backend) {
	rdb := b.client(t)
	ctx := ctxT(t, 120*time.Second)
	mu, err := newMutex(t, rdb, uniqueName(b, "fence"))
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 20, 50
	var (
		seqMu  sync.Mutex
		tokens []int64
		wg     sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				l, err := mu.Acquire(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				seqMu.Lock()
				tokens = append(tokens, l.Token())
				seqMu.Unlock()
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(tokens) != workers*each {
		t.Fatalf("%d acquisitions, want %d", len(tokens), workers*each)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d at %d is not above %d", tokens[i], i, tokens[i-1])
		}
	}
}

func testFencingIdle(t *testing.T, b backend) {
	// Records of the limits in use live 3 periods (30s by default): short
	// here, so that every key of the name goes within the wait below.
	old := limiter.SetUsePeriod(500 * time.Millisecond)
	defer limiter.SetUsePeriod(old)
	rdb := b.client(t)
	ctx := ctxT(t, 20*time.Second)
	prefix := fmt.Sprintf("idle%d:", nameSeq.Add(1))
	mu, err := redistest.Limiter(t, rdb, limiter.Prefix(prefix)).Mutex(uniqueName(b, "idle"),
		limiter.TTL(100*time.Millisecond), limiter.RefreshInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	first, err := mu.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Not released: it expires, and then every key must go away by itself.
	redistest.Eventually(t, 10*time.Second, "every key of an idle semaphore expires", func() bool {
		return len(keysMatching(t, rdb, prefix+"*")) == 0
	})
	second, err := mu.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if second.Token() <= first.Token() {
		t.Fatalf("token after idle expiry %d is not above %d", second.Token(), first.Token())
	}
	for _, k := range keysMatching(t, rdb, prefix+"*") {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Fatalf("key %s would live forever (PTTL %v)", k, ttl)
		}
	}
}

// A waiter blocked on a full semaphore costs (nearly) no Redis commands,
// and wakes on release rather than on its timer.
func testWaitingIsQuiet(t *testing.T, b backend) {
	rdb := b.client(t)
	ctx := ctxT(t, 20*time.Second)
	name := uniqueName(b, "quiet")
	holderSem, err := newMutex(t, b.client(t), name, limiter.TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waiterSem, err := newMutex(t, rdb, name, limiter.TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	held, err := holderSem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.reset(t)
	start := time.Now()
	got := make(chan time.Time, 1)
	go func() {
		l, err := waiterSem.Acquire(ctx)
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		_ = l.Release(ctx)
	}()
	time.Sleep(time.Second)
	calls := b.calls(t)
	// Commands a client sends (those run inside scripts are counted by
	// Redis too, and say nothing about round trips).
	scripts := redistest.Scripts(calls)
	sent := scripts + calls["subscribe"] + calls["ssubscribe"] + calls["ping"]
	// Expected: the first attempt, SUBSCRIBE, the attempt after it.
	if scripts > 3 || sent > 5 {
		t.Fatalf("waiting for 1s cost %d commands (%d scripts): %v", sent, scripts, calls)
	}
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	at := <-got
	// The fallback timer is capped at 2s from the start of the wait, so a
	// wake before that came from the release message. Not a speed claim:
	// the benchmarks measure that.
	if at.IsZero() || at.Sub(start) >= 1900*time.Millisecond {
		t.Fatalf("waiter acquired %v after release (%v after it began): woken by timer, not release",
			at.Sub(released), at.Sub(start))
	}
}

func testAcquireGivesUp(t *testing.T, b backend) {
	rdb := b.client(t)
	ctx := ctxT(t, 10*time.Second)
	name := uniqueName(b, "giveup")
	sem, err := newMutex(t, rdb, name, limiter.AcquireTimeout(150*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	held, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sem.Acquire(ctx)
	if !errors.Is(err, limiter.ErrTimeout) || !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("AcquireTimeout: want ErrTimeout+ErrBusy, got %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	noTimeout, _ := newMutex(t, rdb, name, limiter.AcquireTimeout(0))
	if _, err := noTimeout.Acquire(cctx); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, limiter.ErrTimeout) {
		t.Fatalf("caller's deadline: want context.DeadlineExceeded, got %v", err)
	}
	hs, _ := holders(ctx, sem)
	if len(hs) != 1 || hs[0].ID != held.ID() {
		t.Fatalf("a failed Acquire left something held: %+v", hs)
	}
}

// Waiters of one process get the permit in the order they came, and a
// holder that releases and asks again goes to the back of the queue.
func testArrivalOrder(t *testing.T, b backend) {
	rdb := b.client(t)
	ctx := ctxT(t, 20*time.Second)
	mu, err := newMutex(t, rdb, uniqueName(b, "order"))
	if err != nil {
		t.Fatal(err)
	}
	first, err := mu.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 5
	var (
		orderMu sync.Mutex
		order   []int
		wg      sync.WaitGroup
	)
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := mu.Acquire(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			orderMu.Lock()
			order = append(order, i)
			orderMu.Unlock()
			_ = l.Release(ctx)
		}()
		time.Sleep(30 * time.Millisecond) // let it queue before the next one comes
	}
	// The holder releases and asks again at once: it must not overtake.
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := mu.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	orderMu.Lock()
	got := append([]int(nil), order...)
	orderMu.Unlock()
	_ = again.Release(ctx)
	wg.Wait()
	if len(got) != waiters {
		t.Fatalf("the re-acquiring holder overtook queued waiters: served %v before it", got)
	}
	for i, w := range got {
		if w != i {
			t.Fatalf("served in order %v, want arrival order", got)
		}
	}
}

// Strict FIFO: a heavy waiter at the head is not overtaken by lighter
// ones, so a stream of weight-1 acquisitions cannot starve it.
func testHeavyWaiterNotStarved(t *testing.T, b backend) {
	ctx := ctxT(t, 30*time.Second)
	name := uniqueName(b, "heavy")
	sem, err := newSemaphore(t, b.client(t), name, 3)
	if err != nil {
		t.Fatal(err)
	}
	other, err := newSemaphore(t, b.client(t), name, 3, limiter.AcquireTimeout(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var light atomic.Int64
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
				_ = sem.Do(ctx, func(context.Context) error {
					light.Add(1)
					time.Sleep(time.Millisecond)
					return nil
				})
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	for i := range 3 {
		l, err := other.Acquire(ctx, limiter.Weight(3))
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("weight-3 acquire %d beside weight-1 loops (%d light grants): %v", i, light.Load(), err)
		}
		time.Sleep(time.Millisecond)
		_ = l.Release(ctx)
	}
	close(stop)
	wg.Wait()
	if light.Load() < 10 {
		t.Fatalf("only %d light grants: the test proves nothing", light.Load())
	}
}
