// Command cron is the demo of redsem's scheduler: a cron process decides
// when the "nightly export" runs, holds its lock, and hands the lock to the
// worker that runs the task; ticks that come while a run still holds the
// lock are skipped. One export fails: the worker keeps the lock for
// asynq's retry, which runs under it (same lease, a new fencing token)
// before any other tick can start.
//
//	go run ./examples/cron                    # embedded Redis (miniredis)
//	go run ./examples/cron -redis localhost:6379
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/scheduler"
)

func main() {
	addr := flag.String("redis", os.Getenv("REDIS_ADDR"), "Redis address (default: an embedded miniredis)")
	runFor := flag.Duration("for", 12*time.Second, "how long the demo runs")
	flag.Parse()
	if err := run(*addr, *runFor); err != nil {
		log.Fatal(err)
	}
}

func run(addr string, runFor time.Duration) error {
	where := addr
	if addr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		addr, where = mr.Addr(), "embedded miniredis"
	}
	// One go-redis client: the limiter Client, the asynq server and the
	// asynq client share it.
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	// One limiter Client per process (here the cron process and the worker
	// share one). Deferred calls run last-in first-out: it closes after
	// the worker shut down (below) and before rdb.
	lc, err := limiter.New(rdb)
	if err != nil {
		return err
	}
	defer lc.Close(context.Background())
	start := time.Now()
	say := func(format string, a ...any) {
		fmt.Printf("%5.1fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, a...))
	}
	quiet := slog.New(slog.DiscardHandler)

	// Worker side: adopt the lock, keep it alive while the export runs;
	// a failed run keeps it for asynq's retry, 1s later.
	retryIn := func(int, error, *asynq.Task) time.Duration { return time.Second }
	adopt, err := scheduler.Adopt(lc, scheduler.WorkerTTL(3*time.Second), scheduler.Logger(quiet),
		scheduler.RetryDelayFunc(retryIn))
	if err != nil {
		return err
	}
	var runs, running, peak atomic.Int64
	worker := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency: 2, LogLevel: asynq.FatalLevel,
		IsFailure:                asynqmw.IsFailure(nil),
		RetryDelayFunc:           asynqmw.RetryDelay(nil), // waits the RetryIn the lock is kept for
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		TaskCheckInterval:        100 * time.Millisecond,
	})
	if err := worker.Start(adopt(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		lease, _ := limiter.LeaseFrom(ctx)
		retry, _ := asynq.GetRetryCount(ctx)
		n := runs.Add(1)
		now := running.Add(1)
		for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
		}
		defer running.Add(-1)
		took := time.Duration(500+rand.IntN(2500)) * time.Millisecond
		what := "adopted the lock"
		if retry > 0 {
			what = "(asynq's retry) took over the kept lock"
		}
		say("worker: export #%d %s: lease %s, fencing token %d; runs %v", n, what, lease.ID(), lease.Token(), took.Round(100*time.Millisecond))
		select {
		case <-time.After(took):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if n == 2 {
			say("worker: export #%d failed; the lock is kept for asynq's retry in 1s", n)
			return errors.New("export failed")
		}
		say("worker: export #%d done; the lock is released as the handler returns", n)
		return nil
	}))); err != nil {
		return err
	}
	defer worker.Shutdown()

	// Cron side: every 2 seconds, unless the previous export still runs.
	metrics := scheduler.NewCollector()
	client := asynq.NewClientFromRedisClient(rdb)
	defer client.Close()
	s, err := scheduler.New(lc, client, scheduler.Metrics(metrics), scheduler.Logger(quiet))
	if err != nil {
		return err
	}
	// "@every 2s" ticks on even seconds in every scheduler process.
	job := scheduler.Job{Name: "nightly-export", Spec: "@every 2s", TaskType: "export", TTL: 30 * time.Second,
		Options: []asynq.Option{asynq.MaxRetry(1)}}
	if err := s.Register(job); err != nil {
		return err
	}
	fmt.Printf("redsem cron demo on %s: a job every 2s whose run takes 0.5-3s (the second one fails), for %v\n\n", where, runFor)
	s.Start()

	var lastTicks, lastSkips, lastEnq float64
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for end := time.After(runFor); ; {
		select {
		case <-tick.C:
			ticks := metrics.Count(job.Name, scheduler.EventTick)
			skips := metrics.Count(job.Name, scheduler.EventSkippedBusy)
			enq := metrics.Count(job.Name, scheduler.EventEnqueued)
			if ticks > lastTicks {
				switch {
				case skips > lastSkips:
					say("cron:   tick skipped, the previous export still holds the lock")
				case enq > lastEnq:
					say("cron:   tick: lock taken, task enqueued with the lock's ticket")
				}
				lastTicks, lastSkips, lastEnq = ticks, skips, enq
			}
		case <-end:
			<-s.Stop().Done()
			fmt.Printf("\nreport: %.0f ticks, %.0f enqueued, %.0f skipped while held, %d exports ran, at most %d at once\n",
				metrics.Count(job.Name, scheduler.EventTick), metrics.Count(job.Name, scheduler.EventEnqueued),
				metrics.Count(job.Name, scheduler.EventSkippedBusy), runs.Load(), peak.Load())
			if peak.Load() > 1 {
				return fmt.Errorf("%d exports ran at once", peak.Load())
			}
			return nil
		}
	}
}
