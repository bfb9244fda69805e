package limiter_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
	"github.com/redsem/redsem/limiter/internal/scriptcall"
)

// A pause shorter than a microsecond is a pause of one, never a lift: an
// HTTP date a few hundred ns away must not end another process's pause.
func TestTinyPauseDoesNotLiftOne(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 10*time.Second)
	insp := inspect.New(clientFor(t, b.client(t)))
	if _, err := insp.Pause(ctx, "tiny", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := insp.Pause(ctx, "tiny", 500*time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	if st, err := insp.Rate(ctx, "tiny"); err != nil || st.Paused < 50*time.Second {
		t.Fatalf("after Pause(1m) then Pause(500ns): paused %v, %v; want ~1m", st.Paused, err)
	}
}

// No burst at a pause's end, even when nothing was reserved during it
// (Allow and bounded waits refuse without moving the rate on).
func TestNoBurstAfterAPause(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rl := newRate(t, b, "pause-end", limiter.Rate{Events: 10, Per: time.Second, Burst: 10})
	left, err := inspect.New(clientFor(t, b.client(t))).Pause(ctx, "pause-end", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(left + 5*time.Millisecond)
	n := 0
	for range 10 {
		if ok, err := rl.Allow(ctx); err != nil {
			t.Fatal(err)
		} else if ok {
			n++
		}
	}
	if n > 1 {
		t.Errorf("%d of a burst of 10 allowed at a pause's end, want 1 (then paced)", n)
	}
}

// Times are rounded up, never to nearest: a rate whose interval is not a
// whole microsecond (3000/s: 333.3µs; Per 1.5µs) runs slow, never fast.
func TestRateRoundsSlow(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 30*time.Second)
	for _, r := range []limiter.Rate{
		{Events: 3000, Per: time.Second, Burst: 1},
		{Events: 1, Per: 1500 * time.Nanosecond, Burst: 1},
	} {
		rl := newRate(t, b, "round-"+r.String(), r)
		first, err := rl.ReserveN(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		const n = 1000
		var last *limiter.Reservation
		for range n {
			if last, err = rl.ReserveN(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
		if span, want := last.Time().Sub(first.Time()), n*r.Per/time.Duration(r.Events); span < want-50*time.Microsecond {
			t.Errorf("%v: %d events %v apart, want at least %v", r, n, span, want)
		}
	}
}

// A nil ctx is refused with an *ArgumentError, never a panic; a rate
// whose burst takes more than a day to refill is refused.
func TestRateNilContextAndHugeBurst(t *testing.T) {
	b := singleBackend(t)
	rl := newRate(t, b, "nil", limiter.Rate{Events: 1, Per: time.Second, Burst: 1})
	var ae *limiter.ArgumentError
	//lint:ignore SA1012 the nil ctx is the point
	if _, err := rl.ReserveN(nil, 1); !errors.As(err, &ae) || ae.Arg != "ctx" { //nolint:staticcheck
		t.Errorf("ReserveN(nil): %v, want an ArgumentError naming ctx", err)
	}
	if err := rl.WaitN(nil, 1); !errors.As(err, &ae) || ae.Arg != "ctx" { //nolint:staticcheck
		t.Errorf("WaitN(nil): %v, want an ArgumentError naming ctx", err)
	}
	r, err := rl.ReserveN(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(nil); !errors.As(err, &ae) || ae.Arg != "ctx" { //nolint:staticcheck
		t.Errorf("Reservation.Wait(nil): %v, want an ArgumentError naming ctx", err)
	}
	huge := limiter.Rate{Events: 1, Per: 24 * time.Hour, Burst: 1 << 30}
	if err := huge.Validate(); !errors.As(err, &ae) || ae.Arg != "rate.Burst" {
		t.Errorf("Validate(%v): %v, want an ArgumentError naming rate.Burst", huge, err)
	}
}

// acquireCounter counts the acquire script calls a client sends.
type acquireCounter struct{ n atomic.Int64 }

func (*acquireCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (*acquireCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *acquireCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if _, ok := scriptcall.Args("acquire", cmd.Args()); ok {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// Waiters held by a pause do not poll: the keep-alive does not report a
// turn while the name is paused.
func TestPausedWaitersDoNotPoll(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 20*time.Second)
	rdb := srv.Client(t)
	calls := new(acquireCounter)
	rdb.AddHook(calls)
	sem, err := redistest.Limiter(t, rdb).Semaphore("paused-poll", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inspect.New(redistest.Limiter(t, srv.Client(t))).Pause(ctx, "paused-poll", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, 3500*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	for range 3 {
		go func() {
			defer func() { done <- struct{}{} }()
			if _, err := sem.Acquire(wait); err == nil {
				t.Error("granted during the pause")
			}
		}()
	}
	redistest.Eventually(t, 3*time.Second, "the waiters queued", func() bool {
		return rdb.ZCard(ctx, queueKey("paused-poll")).Val() == 3
	})
	queued := calls.n.Load()
	for range 3 {
		<-done
	}
	// The keep-alive (every second) would make one try a second if it
	// reported a turn.
	if n := calls.n.Load() - queued; n > 0 {
		t.Errorf("%d acquire calls by 3 queued waiters over ~3s of a pause, want none: they poll", n)
	}
}
