package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/scheduler"
)

// retryWorker runs an asynq server with Adopt and asynqmw's retry
// helpers, its own limiter Client and short check intervals; failed runs
// keep their lock for delay (unless opts say otherwise), and errors that
// are neither busy nor a kept lock's are retried after delay too.
func (e env) retryWorker(t *testing.T, delay time.Duration, h asynq.HandlerFunc, opts ...scheduler.Option) {
	retryIn := func(int, error, *asynq.Task) time.Duration { return delay }
	e.workerWith(t, asynq.Config{
		Concurrency: 4, LogLevel: asynq.FatalLevel,
		IsFailure:                asynqmw.IsFailure(nil),
		RetryDelayFunc:           asynqmw.RetryDelay(retryIn),
		DelayedTaskCheckInterval: 50 * time.Millisecond, TaskCheckInterval: 50 * time.Millisecond,
	}, h, append([]scheduler.Option{scheduler.RetryDelayFunc(retryIn)}, opts...)...)
}

// run is one run of a scheduled task, as its handler saw it.
type run struct {
	task       string
	retry      int
	lease      string
	token      int64
	start, end time.Time
	failed     bool
}

type runLog struct {
	mu   sync.Mutex
	runs []*run
	now  atomic.Int64 // handlers running
	over atomic.Int64 // times two ran at once
}

func (l *runLog) begin(ctx context.Context) *run {
	if l.now.Add(1) > 1 {
		l.over.Add(1)
	}
	r := &run{start: time.Now()}
	r.task, _ = asynq.GetTaskID(ctx)
	r.retry, _ = asynq.GetRetryCount(ctx)
	if lease, ok := limiter.LeaseFrom(ctx); ok {
		r.lease, r.token = lease.ID(), lease.Token()
	}
	l.mu.Lock()
	l.runs = append(l.runs, r)
	l.mu.Unlock()
	return r
}

func (l *runLog) end(r *run, failed bool) {
	l.mu.Lock()
	r.end, r.failed = time.Now(), failed
	l.mu.Unlock()
	l.now.Add(-1)
}

func (l *runLog) snapshot() []run {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]run, len(l.runs))
	for i, r := range l.runs {
		out[i] = *r
	}
	return out
}

// A job every second whose first run fails: asynq's retry (1.5s later)
// runs under the same lock (same lease id, a new fencing token), and the
// tick that comes in between is skipped, not run.
func TestFailedRunRetriedUnderSameLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var log runLog
	var failedOnce atomic.Bool
	// The server's delay for other errors is a minute: only the
	// *asynqmw.RetryError's RetryIn, which asynqmw.RetryDelay reads, brings
	// the retry back within the test's 15s.
	keepFor := func(int, error, *asynq.Task) time.Duration { return 1500 * time.Millisecond }
	e.retryWorker(t, time.Minute, func(ctx context.Context, _ *asynq.Task) error {
		r := log.begin(ctx)
		time.Sleep(200 * time.Millisecond)
		fail := failedOnce.CompareAndSwap(false, true)
		log.end(r, fail)
		if fail {
			return errors.New("export failed")
		}
		return nil
	}, scheduler.RetryDelayFunc(keepFor))
	s, _ := scheduler.New(e.lc, e.client, scheduler.Metrics(e.metrics))
	err := s.Register(scheduler.Job{Name: "flaky", Spec: "* * * * * *", TaskType: "flaky", TTL: 5 * time.Second,
		Options: []asynq.Option{asynq.MaxRetry(2)}})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	redistest.Eventually(t, 15*time.Second, "the failed run's retry and one more tick run", func() bool {
		runs := log.snapshot()
		return len(runs) >= 3 && !runs[len(runs)-1].end.IsZero()
	})
	<-s.Stop().Done()
	runs := log.snapshot()
	if log.over.Load() != 0 {
		t.Fatalf("%d overlapping runs: %+v", log.over.Load(), runs)
	}
	first, retry := runs[0], runs[1]
	if !first.failed || first.retry != 0 {
		t.Fatalf("first run %+v, want the failed one", first)
	}
	if retry.task != first.task || retry.retry != 1 {
		t.Fatalf("the run after the failed one is %+v, want its retry (task %s, retry 1): another tick ran in between", retry, first.task)
	}
	if retry.lease != first.lease || retry.token <= first.token {
		t.Fatalf("retry lease %s token %d; first %s token %d: want the same lease, a new token", retry.lease, retry.token, first.lease, first.token)
	}
	if !strings.HasPrefix(first.lease, "default:flaky:") {
		t.Fatalf("lease id %q, want the queue and the tick's task id", first.lease)
	}
	if n := e.metrics.Count("flaky", scheduler.EventSkippedBusy); n < 1 {
		t.Fatal("no tick was skipped while the lock was kept for the retry")
	}
	if n := e.metrics.Count("flaky", scheduler.EventKept); n != 1 {
		t.Fatalf("kept counted %v times, want 1", n)
	}
}

// A run that ignores its 1s deadline, then fails: asynq's retry finds it
// still holding the lock and is re-queued (no retry spent) until it
// returns, then runs under the lock it kept. The two never overlap.
func TestStuckRunThenRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var log runLog
	var calls atomic.Int64
	e.retryWorker(t, 100*time.Millisecond, func(ctx context.Context, _ *asynq.Task) error {
		r := log.begin(ctx)
		if calls.Add(1) == 1 {
			time.Sleep(2500 * time.Millisecond) // ignores its deadline
			log.end(r, true)
			return errors.New("export failed, late")
		}
		log.end(r, false)
		return nil
	}, scheduler.WorkerTTL(time.Second))
	s, _ := scheduler.New(e.lc, e.client)
	info, err := s.Enqueue(context.Background(), scheduler.Job{Name: "stuck", TaskType: "stuck",
		Options: []asynq.Option{asynq.Timeout(time.Second), asynq.MaxRetry(3)}})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 15*time.Second, "the retry runs", func() bool { return len(log.snapshot()) == 2 })
	runs := log.snapshot()
	if log.over.Load() != 0 || runs[1].start.Before(runs[0].end) {
		t.Fatalf("the retry ran while the stuck run still held the lock: %+v", runs)
	}
	if runs[1].lease != runs[0].lease || runs[1].token <= runs[0].token {
		t.Fatalf("runs %+v: want the same lease, a new token", runs)
	}
	if e.metrics.Count("stuck", scheduler.EventAdoptBusy) < 1 {
		t.Fatal("the retry never found the stuck run holding the lock")
	}
	ti, err := e.insp.GetTaskInfo("default", info.ID)
	redistest.Eventually(t, 5*time.Second, "the task completes", func() bool {
		ti, err = e.insp.GetTaskInfo("default", info.ID)
		return err == nil && ti.State == asynq.TaskStateCompleted
	})
	if ti.Retried != 1 {
		t.Fatalf("retried %d times, want 1 (the deadline; busy re-queues are free)", ti.Retried)
	}
}
