package asynqmw_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// freshLimiter is a limiter Client with the default restart quarantine,
// on a redis-server that has just started.
func freshLimiter(t *testing.T) *limiter.Client {
	t.Helper()
	srv := redistest.StartServer(t)
	lc, err := limiter.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close(context.Background()) })
	return lc
}

// On a Redis that just started, a task whose wait is shorter than the
// restart quarantine is re-queued once, for the quarantine's end, not
// after its AcquireTimeout to find it still on.
func TestQuarantineRequeuesForItsEnd(t *testing.T) {
	mw, err := asynqmw.New(freshLimiter(t), []asynqmw.Rule{{Name: "q", Limit: 1, AcquireTimeout: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	err = mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		t.Error("ran during the quarantine")
		return nil
	})).ProcessTask(context.Background(), asynq.NewTask("t", nil))
	var busy *asynqmw.BusyError
	if !errors.As(err, &busy) || asynqmw.IsFailure(nil)(err) {
		t.Fatalf("got %v, want a *BusyError, not a failure", err)
	}
	// The rule's TTL (3s by default) is the quarantine; 200ms of it went
	// by in the wait.
	if busy.RetryIn < 2*time.Second {
		t.Fatalf("RetryIn %v, want until the quarantine's end (about 2.8s)", busy.RetryIn)
	}
}

// With the rules' defaults the quarantine (3s) is shorter than the wait
// (5s): a task on a Redis that just started waits it out and runs.
func TestDefaultsWaitOutTheQuarantine(t *testing.T) {
	mw, err := asynqmw.New(freshLimiter(t), []asynqmw.Rule{{Name: "q", Limit: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	err = mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		ran = true
		return nil
	})).ProcessTask(context.Background(), asynq.NewTask("t", nil))
	if err != nil || !ran {
		t.Fatalf("got %v (ran %v), want the task to run after the quarantine", err, ran)
	}
}

// A Redis that cannot be reached re-queues the task like a busy one,
// after about a second, spending no retry: it did not run.
func TestUnreachableRedisRequeues(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	mw, err := asynqmw.New(redistest.Limiter(t, rdb), []asynqmw.Rule{{Name: "u", Limit: 1, AcquireTimeout: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	err = mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		t.Error("ran without Redis")
		return nil
	})).ProcessTask(context.Background(), asynq.NewTask("t", nil))
	var busy *asynqmw.BusyError
	if !errors.As(err, &busy) || asynqmw.IsFailure(nil)(err) || busy.RetryIn > 1500*time.Millisecond {
		t.Fatalf("got %v, want a *BusyError re-queued within about a second", err)
	}
}

// A permit taken before a restart forgot it, lost while the task waits
// for its next rule's, re-queues the task after about the TTL (the
// restart's quarantine), spending no retry: it did not run.
func TestPermitLostWhileWaitingRequeues(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	lc := redistest.Limiter(t, rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	byKey := func(context.Context, *asynq.Task) (string, bool) { return "A", true }
	mw, err := asynqmw.New(lc, []asynqmw.Rule{
		{Name: "per", Limit: 1, Key: byKey, TTL: time.Second},
		{Name: "all", Limit: 1, TTL: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	all, err := lc.Semaphore("all", 1)
	if err != nil {
		t.Fatal(err)
	}
	held, err := all.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	go func() { // forget the key's permit once the task holds it
		for ctx.Err() == nil {
			if keys, _ := rdb.Keys(ctx, "*{per:A}*").Result(); len(keys) > 0 {
				rdb.Del(ctx, keys...)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	err = mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		t.Error("ran without the permits")
		return nil
	})).ProcessTask(ctx, asynq.NewTask("t", nil))
	var busy *asynqmw.BusyError
	if !errors.As(err, &busy) || asynqmw.IsFailure(nil)(err) || busy.RetryIn < time.Second || busy.RetryIn > 1500*time.Millisecond {
		t.Fatalf("got %v, want a *BusyError re-queued after about the TTL (1s), not a failure", err)
	}
}
