package scheduler_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
	"github.com/redsem/redsem/scheduler"
)

func TestHandoffToWorker(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s, err := scheduler.New(e.lc, e.client, scheduler.Metrics(e.metrics))
	if err != nil {
		t.Fatal(err)
	}
	job := scheduler.Job{Name: "export", TaskType: "export", TTL: 30 * time.Second}
	in := inspect.New(e.lc)
	release := make(chan struct{})
	held := make(chan []inspect.Holder, 1)
	tokens := make(chan int64, 1)
	e.worker(t, func(ctx context.Context, task *asynq.Task) error {
		hs, _ := in.Holders(ctx, "export")
		held <- hs
		if l, ok := limiter.LeaseFrom(ctx); ok {
			tokens <- l.Token()
		} else {
			tokens <- 0
		}
		<-release
		return nil
	})
	info, err := s.Enqueue(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	hs := <-held
	if len(hs) != 1 {
		t.Fatalf("%d holders of the lock while the adopted handler runs", len(hs))
	}
	if tok := <-tokens; tok != hs[0].Token || tok == 0 {
		t.Fatalf("limiter.LeaseFrom in the handler: token %d, want the adopted lease's %d", tok, hs[0].Token)
	}
	if _, err := s.Enqueue(ctx, job); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("second run while the first holds the lock: want ErrBusy, got %v", err)
	}
	close(release)
	redistest.Eventually(t, 10*time.Second, "the worker releases the lock", func() bool {
		n, _ := redistest.Available(ctx, in, "export", 1)
		return n == 1
	})
	if e.metrics.Count("export", scheduler.EventAdopted) != 1 || e.metrics.Count("export", scheduler.EventSkippedBusy) != 1 {
		t.Fatal("adopted/skipped counters")
	}
	if info.ID == "" {
		t.Fatal("no task id")
	}
}

// A task whose lease expired before a worker picked it up is skipped.
func TestExpiredTicketIsSkipped(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s, _ := scheduler.New(e.lc, e.client, scheduler.Metrics(e.metrics))
	info, err := s.Enqueue(ctx, scheduler.Job{Name: "late", TaskType: "late", TTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // no worker yet: the lock expires
	var ran atomic.Bool
	e.worker(t, func(context.Context, *asynq.Task) error { ran.Store(true); return nil })
	redistest.Eventually(t, 20*time.Second, "the task is archived", func() bool {
		ti, err := e.insp.GetTaskInfo("default", info.ID)
		return err == nil && ti.State == asynq.TaskStateArchived
	})
	if ran.Load() {
		t.Fatal("the handler ran without the lock")
	}
	if e.metrics.Count("late", scheduler.EventAdoptFailed) != 1 {
		t.Fatal("adopt failure not counted")
	}
}

func TestLostLockCancelsHandler(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s, _ := scheduler.New(e.lc, e.client)
	cause := make(chan error, 1)
	started := make(chan struct{})
	e.worker(t, func(ctx context.Context, _ *asynq.Task) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil
	}, scheduler.WorkerTTL(time.Second))
	if _, err := s.Enqueue(ctx, scheduler.Job{Name: "lost", TaskType: "lost"}); err != nil {
		t.Fatal(err)
	}
	<-started
	keys, _ := e.rdb.Keys(ctx, limiter.DefaultPrefix+"*").Result()
	e.rdb.Del(ctx, keys...)
	select {
	case err := <-cause:
		if !errors.Is(err, limiter.ErrLeaseLost) {
			t.Fatalf("cause %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler not cancelled after its lock was lost")
	}
}

// A handler that outlives its context (asynq gave up on it at its
// deadline) releases the lock when it returns, not at the worker's TTL.
func TestAbandonedHandlerReleasesOnReturn(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s, _ := scheduler.New(e.lc, e.client)
	returned := make(chan struct{})
	var runs atomic.Int64
	e.worker(t, func(ctx context.Context, _ *asynq.Task) error {
		if runs.Add(1) == 1 {
			time.Sleep(2 * time.Second) // ignores its 1s deadline
			close(returned)
		}
		return nil
	})
	// asynq counts timeouts in whole seconds; WorkerTTL is 10s.
	if _, err := s.Enqueue(ctx, scheduler.Job{Name: "zombie", TaskType: "zombie", Options: []asynq.Option{asynq.Timeout(time.Second)}}); err != nil {
		t.Fatal(err)
	}
	<-returned
	back := time.Now()
	redistest.Eventually(t, 10*time.Second, "the lock is released", func() bool {
		n, _ := redistest.Available(ctx, inspect.New(e.lc), "zombie", 1)
		return n == 1
	})
	if took := time.Since(back); took > 3*time.Second {
		t.Fatalf("lock free %v after the handler returned: it lapsed rather than being released", took)
	}
}
