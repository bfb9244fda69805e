package limiter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// A pause holds a semaphore's waiters in other processes, even as its
// permits are released, and they are granted at its end, not before.
func TestPauseHoldsSemaphoreWaitersInEveryProcess(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 30*time.Second)
	name := "paused-sem"
	rdb := b.client(t)
	mu, _ := newMutex(t, rdb, name)
	held, err := mu.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cmd := startWaiters(t, b, name, "w", 2, 10)
	redistest.Eventually(t, 20*time.Second, "the waiters queued", func() bool {
		return rdb.ZCard(ctx, queueKey(name)).Val() == 2
	})
	left, err := inspect.New(clientFor(t, rdb)).Pause(ctx, name, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(left)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := mu.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("TryAcquire while paused: %v, want ErrBusy", err)
	}
	for time.Until(end) > 50*time.Millisecond {
		if n := rdb.LLen(ctx, "order:{"+name+"}").Val(); n > 0 {
			t.Fatalf("a waiter was granted %v before the pause's end", time.Until(end).Round(time.Millisecond))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if late := time.Since(end); late > 2*time.Second {
		t.Errorf("the waiters were done %v after the pause's end, want soon after", late)
	}
}

// Unpause wakes the waiters at once, rather than at the pause's end (or
// at their next keep-alive, which reports a turn whose wake-up was lost).
func TestUnpauseWakesTheWaiters(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 30*time.Second)
	rdb := b.client(t)
	mu, _ := newMutex(t, rdb, "unpaused")
	insp := inspect.New(clientFor(t, rdb))
	if _, err := insp.Pause(ctx, "unpaused", time.Minute); err != nil {
		t.Fatal(err)
	}
	var be *limiter.BusyError
	if _, err := mu.TryAcquire(ctx); !errors.As(err, &be) || !be.Paused || be.RetryIn < 50*time.Second {
		t.Fatalf("TryAcquire while paused: %v, want a BusyError with Paused and RetryIn ~1m", err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := mu.Acquire(ctx)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	redistest.Eventually(t, 5*time.Second, "the waiter queued", func() bool {
		return rdb.ZCard(ctx, queueKey("unpaused")).Val() == 1
	})
	start := time.Now()
	if err := insp.Unpause(ctx, "unpaused"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("granted %v after Unpause", time.Since(start).Round(time.Millisecond))
	case <-time.After(500 * time.Millisecond):
		// The keep-alive would find its turn about a second later.
		t.Fatal("the waiter was not granted within 500ms of Unpause (the pause had a minute left)")
	}
}

// MaxWait bounds one Acquire in place of AcquireTimeout, and ends it as
// AcquireTimeout would: with a *BusyError that says the name is paused
// and until when, not with the caller's context.
func TestMaxWaitBoundsOneAcquire(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 30*time.Second)
	rdb := b.client(t)
	mu, _ := newMutex(t, rdb, "maxwait", limiter.AcquireTimeout(20*time.Second))
	if _, err := inspect.New(clientFor(t, rdb)).Pause(ctx, "maxwait", time.Minute); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := mu.Acquire(ctx, limiter.MaxWait(300*time.Millisecond))
	var be *limiter.BusyError
	if !errors.As(err, &be) || !be.Paused || be.RetryIn < 50*time.Second || !errors.Is(err, limiter.ErrTimeout) {
		t.Fatalf("Acquire with MaxWait 300ms while paused: %v, want a BusyError with Paused and RetryIn ~1m", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 5*time.Second {
		t.Errorf("gave up after %v, want about MaxWait (300ms), not AcquireTimeout (20s)", d)
	}
	var ae *limiter.ArgumentError
	if _, err := mu.Acquire(ctx, limiter.MaxWait(-time.Second)); !errors.As(err, &ae) || ae.Arg != "MaxWait" {
		t.Errorf("MaxWait(-1s): %v, want an *ArgumentError naming MaxWait", err)
	}
}
