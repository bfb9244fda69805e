package asynqmw_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/internal/redistest"
)

// drain enqueues n tasks, then starts a server (concurrency 10) with h and
// returns how long it took to process them all.
func drain(b *testing.B, n int, mw asynq.MiddlewareFunc, h asynq.HandlerFunc) time.Duration {
	b.Helper()
	srv := redistest.StartServer(b)
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	for range n {
		if _, err := client.Enqueue(asynq.NewTask("api:noop", nil)); err != nil {
			b.Fatal(err)
		}
	}
	var done atomic.Int64
	finished := make(chan struct{})
	handler := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		err := h(ctx, t)
		if done.Add(1) == int64(n) {
			close(finished)
		}
		return err
	})
	var wrapped asynq.Handler = handler
	if mw != nil {
		wrapped = mw(handler)
	}
	s := asynq.NewServer(asynq.RedisClientOpt{Addr: srv.Addr()}, asynq.Config{
		Concurrency: 10, LogLevel: asynq.FatalLevel,
		IsFailure: asynqmw.IsFailure(nil), RetryDelayFunc: asynqmw.RetryDelay(nil),
		DelayedTaskCheckInterval: 50 * time.Millisecond,
	})
	start := time.Now()
	if err := s.Start(wrapped); err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown()
	select {
	case <-finished:
	case <-time.After(5 * time.Minute):
		b.Fatal("tasks did not finish")
	}
	return time.Since(start)
}

// BenchmarkNoopThroughput: no-op tasks through an ungated server and one
// gated by a cap that never binds (limit 1000). Goal: gated >= 80%.
func BenchmarkNoopThroughput(b *testing.B) {
	noop := func(context.Context, *asynq.Task) error { return nil }
	ungated := drain(b, b.N, nil, noop)
	srv := redistest.StartServer(b)
	mw, err := asynqmw.New(redistest.Limiter(b, srv.Client(b)), []asynqmw.Rule{{Name: "api", TypePrefix: "api:", Limit: 1000}})
	if err != nil {
		b.Fatal(err)
	}
	gated := drain(b, b.N, mw, noop)
	b.ReportMetric(float64(b.N)/ungated.Seconds(), "ungated-tasks/s")
	b.ReportMetric(float64(b.N)/gated.Seconds(), "gated-tasks/s")
	b.ReportMetric(ungated.Seconds()/gated.Seconds(), "gated/ungated")
}

// BenchmarkBindingCap: 10 handlers, limit 3, 20ms tasks: the ideal is
// 3/20ms = 150 tasks/s. Goal: within 10%.
func BenchmarkBindingCap(b *testing.B) {
	srv := redistest.StartServer(b)
	mw, err := asynqmw.New(redistest.Limiter(b, srv.Client(b)), []asynqmw.Rule{{Name: "api", TypePrefix: "api:", Limit: 3, MaxWait: 5 * time.Second}})
	if err != nil {
		b.Fatal(err)
	}
	const task = 20 * time.Millisecond
	took := drain(b, b.N, mw, func(context.Context, *asynq.Task) error {
		time.Sleep(task)
		return nil
	})
	ideal := 3 / task.Seconds()
	got := float64(b.N) / took.Seconds()
	b.ReportMetric(got, "tasks/s")
	b.ReportMetric(got/ideal, "of-ideal")
}
