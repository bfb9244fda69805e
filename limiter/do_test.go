package limiter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter"
)

// Do and Lease.Run: the work under a lease, then the release. TestCore
// runs testDo and testDoPanic on its backends.

// Do returns fn's error, having released the lease. When the lease is
// lost under fn, fn's ctx is cancelled with cause ErrLeaseLost, and Do's
// error matches ErrLeaseLost though fn returned nil.
func testDo(t *testing.T, b backend) {
	rdb := b.client(t)
	ctx := ctxT(t, 10*time.Second)
	sem, err := newSemaphore(t, rdb, uniqueName(b, "do"), 1)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := sem.Do(ctx, func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
	if n, _ := available(ctx, sem); n != 1 {
		t.Fatal("Do did not release after fn failed")
	}
	// fn's ctx is cancelled with ErrLeaseLost when the lease goes.
	var cause error
	err = sem.Do(ctx, func(fctx context.Context) error {
		hs, _ := holders(ctx, sem)
		for _, h := range hs {
			_ = sem.ReleaseTicket(ctx, limiter.Ticket{Name: sem.Name(), ID: h.ID, Weight: h.Weight, Token: h.Token})
		}
		<-fctx.Done()
		cause = context.Cause(fctx)
		return nil
	}, limiter.Weight(1))
	if !errors.Is(cause, limiter.ErrLeaseLost) {
		t.Fatalf("fn's ctx ended with cause %v, want ErrLeaseLost", cause)
	}
	if !errors.Is(err, limiter.ErrLeaseLost) {
		t.Fatalf("Do after its lease was lost under fn (which returned nil): %v, want ErrLeaseLost", err)
	}
}

// When fn panics, Do releases the lease and the panic goes on: the caller
// recovers fn's own panic value, by when the permit is back.
func testDoPanic(t *testing.T, b backend) {
	rdb := b.client(t)
	ctx := ctxT(t, 10*time.Second)
	sem, err := newSemaphore(t, rdb, uniqueName(b, "panic"), 1)
	if err != nil {
		t.Fatal(err)
	}
	var (
		recovered any
		free      int64
		freeErr   error
	)
	func() {
		defer func() {
			recovered = recover()
			free, freeErr = available(ctx, sem) // before anything else runs
		}()
		err := sem.Do(ctx, func(context.Context) error { panic("boom") })
		t.Errorf("Do returned (%v) after fn panicked: the panic did not go on", err)
	}()
	if recovered != "boom" {
		t.Fatalf("recovered %v from Do, want fn's panic \"boom\"", recovered)
	}
	if freeErr != nil || free != 1 {
		t.Fatalf("when fn's panic reached the caller: available %d, %v; want the permit back", free, freeErr)
	}
}

// Do reports a loss whatever fn returns, and does not block long on the
// release when Redis is unreachable.
func TestDoReportsLossAndReturnsPromptly(t *testing.T) {
	forEachBackend(t, testDoReportsLossAndReturnsPromptly)
}

func testDoReportsLossAndReturnsPromptly(t *testing.T, b backend) {
	rdb := b.client(t)
	ctx := ctxT(t, 20*time.Second)
	sem, _ := newMutex(t, rdb, "doloss", limiter.TTL(300*time.Millisecond), limiter.RefreshInterval(50*time.Millisecond))
	err := sem.Do(ctx, func(ctx context.Context) error {
		l, ok := limiter.LeaseFrom(ctx)
		if !ok || l.Token() <= 0 {
			t.Error("no lease in Do's context")
		}
		rdb.Del(ctx, "redsem:{doloss}:leases", "redsem:{doloss}:state")
		<-ctx.Done()
		return ctx.Err() // what most code returns
	})
	if !errors.Is(err, limiter.ErrLeaseLost) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Do after a loss: %v, want ErrLeaseLost joined with fn's error", err)
	}

	// A client with ContextTimeoutEnabled has the release run on the
	// caller's goroutine, bounded by the socket deadline; one without, in
	// a goroutine the caller stops waiting for.
	for _, rdb := range []redis.UniversalClient{rdb, b.ctxClient(t)} {
		slow, _ := newMutex(t, rdb, "doslow", limiter.TTL(10*time.Second), limiter.ReleaseTimeout(200*time.Millisecond))
		var returned time.Time
		var resume func()
		start := time.Now()
		err = slow.Do(ctx, func(ctx context.Context) error {
			resume = b.pause(t)
			returned = time.Now()
			return nil
		})
		took := time.Since(returned)
		resume()
		if !errors.Is(err, limiter.ErrReleaseFailed) {
			t.Fatalf("Do with an unreachable Redis at release: %v, want ErrReleaseFailed", err)
		}
		if took > time.Second {
			t.Fatalf("Do blocked %v on the release (ReleaseTimeout 200ms); started %v ago", took, time.Since(start))
		}
	}
}
