package asynqmw_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/internal/redistest"
)

// redisCPU is the CPU time the Redis server used so far (INFO cpu).
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sec float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			sec += f
		}
	}
	return time.Duration(sec * float64(time.Second))
}

// roundTrips counts the calls (a pipeline is one) a go-redis client makes.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.n.Add(1); return next(ctx, cmd) }
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { r.n.Add(1); return next(ctx, cmds) }
}

// drain enqueues n tasks on srv, then starts a server (concurrency 10)
// with h and returns how long it took to process them all, and the Redis
// CPU time that took.
func drain(b *testing.B, srv *redistest.Server, n int, mw asynq.MiddlewareFunc, h asynq.HandlerFunc) (time.Duration, time.Duration) {
	b.Helper()
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
	rdb := srv.Client(b)
	before := redisCPU(b, rdb)
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
	took := time.Since(start)
	return took, redisCPU(b, rdb) - before
}

// BenchmarkNoopThroughput: no-op tasks through an ungated server and one
// gated by a cap that never binds (limit 1000), each on its own Redis, in
// the same run: five rounds, the two alternating which goes first (the
// machine's speed drifts), medians of the per-round figures. Goal: gated
// >= 80%. It also reports what gating adds per task: round trips of the
// limiter's go-redis client, and Redis CPU time.
func BenchmarkNoopThroughput(b *testing.B) {
	noop := func(context.Context, *asynq.Task) error { return nil }
	plainSrv, srv := redistest.StartServer(b), redistest.StartServer(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true}) // as README advises
	b.Cleanup(func() { rdb.Close() })
	var trips roundTrips
	rdb.AddHook(&trips)
	mw, err := asynqmw.New(redistest.Limiter(b, rdb), []asynqmw.Rule{{Name: "api", TypePrefix: "api:", Limit: 1000}})
	if err != nil {
		b.Fatal(err)
	}
	const rounds = 5
	var ratios, ungatedRates, gatedRates, plainCPUs, addedCPUs []float64
	n := float64(b.N)
	for round := range rounds {
		var ungated, plainCPU, gated, gatedCPU time.Duration
		runUngated := func() { ungated, plainCPU = drain(b, plainSrv, b.N, nil, noop) }
		runGated := func() { gated, gatedCPU = drain(b, srv, b.N, mw, noop) }
		if round%2 == 0 {
			runUngated()
			runGated()
		} else {
			runGated()
			runUngated()
		}
		ratios = append(ratios, ungated.Seconds()/gated.Seconds())
		ungatedRates = append(ungatedRates, n/ungated.Seconds())
		gatedRates = append(gatedRates, n/gated.Seconds())
		plainCPUs = append(plainCPUs, float64(plainCPU.Microseconds())/n)
		addedCPUs = append(addedCPUs, float64((gatedCPU-plainCPU).Microseconds())/n)
	}
	b.ReportMetric(median(ungatedRates), "ungated-tasks/s")
	b.ReportMetric(median(gatedRates), "gated-tasks/s")
	b.ReportMetric(median(ratios), "gated/ungated")
	b.ReportMetric(slices.Min(ratios), "min-gated/ungated")
	b.ReportMetric(float64(trips.n.Load())/(n*rounds), "added-round-trips/task")
	b.ReportMetric(median(plainCPUs), "redis-cpu-µs/ungated-task")
	b.ReportMetric(median(addedCPUs), "added-redis-cpu-µs/task")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkBindingCap: 10 handlers, limit 3, 20ms tasks: the ideal is
// 3/20ms = 150 tasks/s. Goal: within 10%.
func BenchmarkBindingCap(b *testing.B) {
	srv := redistest.StartServer(b)
	mw, err := asynqmw.New(redistest.Limiter(b, srv.Client(b)), []asynqmw.Rule{{Name: "api", TypePrefix: "api:", Limit: 3, AcquireTimeout: 5 * time.Second}})
	if err != nil {
		b.Fatal(err)
	}
	const task = 20 * time.Millisecond
	took, _ := drain(b, srv, b.N, mw, func(context.Context, *asynq.Task) error {
		time.Sleep(task)
		return nil
	})
	ideal := 3 / task.Seconds()
	got := float64(b.N) / took.Seconds()
	b.ReportMetric(got, "tasks/s")
	b.ReportMetric(got/ideal, "of-ideal")
}
