package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/scheduler"
)

// The cron side takes the job's lock and enqueues the task with its
// ticket; the worker side (Adopt) takes the lock over, runs the handler
// under it and releases it. Both sides are one process here, sharing one
// go-redis client; in production they are separate processes, each with
// its own limiter Client.
func ExampleAdopt() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	lc, err := limiter.New(rdb) // one per process
	if err != nil {
		panic(err)
	}
	defer lc.Close(context.Background()) // deferred first: runs last

	// Worker process.
	adopt, err := scheduler.Adopt(lc)
	if err != nil {
		panic(err)
	}
	ran := make(chan string, 1)
	mux := asynq.NewServeMux()
	mux.Use(adopt)
	mux.HandleFunc("example:nightly-export", func(ctx context.Context, t *asynq.Task) error {
		lease, _ := limiter.LeaseFrom(ctx) // lease.Token() fences the export's writes
		ran <- fmt.Sprintf("export runs under %s, token > 0: %v", lease.Ticket().Name, lease.Token() > 0)
		return nil
	})
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		IsFailure:      asynqmw.IsFailure(nil),  // an earlier run still holding the lock is not a failure
		RetryDelayFunc: asynqmw.RetryDelay(nil), // a failed run's retry comes while its lock is kept
		LogLevel:       asynq.FatalLevel,
	})
	if err := srv.Start(mux); err != nil {
		panic(err)
	}
	defer srv.Shutdown()

	// Cron process: s.Register(job with a Spec) and s.Start() run it on a
	// schedule; Enqueue runs one tick now.
	ac := asynq.NewClientFromRedisClient(rdb)
	defer ac.Close()
	s, err := scheduler.New(lc, ac)
	if err != nil {
		panic(err)
	}
	job := scheduler.Job{Name: "example-export", TaskType: "example:nightly-export",
		TTL: 10 * time.Second} // the time a worker has to pick the task up
	if _, err := s.Enqueue(context.Background(), job); err != nil {
		panic(err) // limiter.ErrBusy while an earlier run holds the lock
	}
	fmt.Println(<-ran)
	// Output:
	// export runs under example-export, token > 0: true
}
