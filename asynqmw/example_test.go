package asynqmw_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/limiter"
)

// At most 10 exports at once across the fleet, and 1 per customer: both
// rules apply to every export, the narrower first. One go-redis client
// serves the limiter Client, the asynq server and the asynq client.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	lc, err := limiter.New(rdb) // one per process
	if err != nil {
		panic(err)
	}
	defer lc.Close(context.Background()) // deferred first: runs after srv.Shutdown

	// customerOf is a Rule.Key: here the payload is the customer's name.
	customerOf := func(ctx context.Context, t *asynq.Task) (key string, ok bool) {
		return string(t.Payload()), len(t.Payload()) > 0
	}
	mw, err := asynqmw.New(lc, []asynqmw.Rule{
		{Name: "example-export-customer", Type: "example:export", Key: customerOf, Limit: 1},
		{Name: "example-exports", Type: "example:export", Limit: 10, AcquireTimeout: 2 * time.Second},
	})
	if err != nil {
		panic(err) // wraps a *limiter.ArgumentError naming the rule's field, e.g. rules[1].Limit
	}
	ran := make(chan string, 1)
	mux := asynq.NewServeMux()
	mux.Use(mw)
	mux.HandleFunc("example:export", func(ctx context.Context, t *asynq.Task) error {
		lease, ok := limiter.LeaseFrom(ctx) // the last rule's lease: its Token fences writes
		ran <- fmt.Sprintf("export for %s ran; holds a lease: %v", t.Payload(), ok && lease.Token() > 0)
		return nil
	})
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		IsFailure:      asynqmw.IsFailure(nil),  // busy is not a failure: no retry spent
		RetryDelayFunc: asynqmw.RetryDelay(nil), // busy tasks come back after about AcquireTimeout
		LogLevel:       asynq.FatalLevel,
	})
	if err := srv.Start(mux); err != nil {
		panic(err)
	}
	defer srv.Shutdown()

	client := asynq.NewClientFromRedisClient(rdb)
	defer client.Close()
	if _, err := client.Enqueue(asynq.NewTask("example:export", []byte("acme"))); err != nil {
		panic(err)
	}
	fmt.Println(<-ran)
	// Output:
	// export for acme ran; holds a lease: true
}

// A handler that hears 429 from the partner returns asynqmw.Pause: every
// worker's tasks of the rule wait out the Retry-After (its rate gives no
// slot, and its semaphore no permit, before the end), and this task comes
// back at the end without spending a retry.
func ExamplePause() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	lc, err := limiter.New(rdb)
	if err != nil {
		panic(err)
	}
	defer lc.Close(context.Background())
	mw, err := asynqmw.New(lc, []asynqmw.Rule{{Name: "example-partner", Type: "example:call",
		Limit: 5, Rate: limiter.Rate{Events: 10, Per: time.Second, Burst: 2}}})
	if err != nil {
		panic(err)
	}
	calls := 0
	done := make(chan string, 1)
	mux := asynq.NewServeMux()
	mux.Use(mw)
	mux.HandleFunc("example:call", func(ctx context.Context, t *asynq.Task) error {
		calls++ // one task: its runs come one after the other
		if calls == 1 {
			retryAfter := time.Second // from the partner's 429
			return asynqmw.Pause(retryAfter, errors.New("partner: 429 Too Many Requests"))
		}
		retried, _ := asynq.GetRetryCount(ctx)
		done <- fmt.Sprintf("call %d succeeded; retries spent: %d", calls, retried)
		return nil
	})
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		IsFailure:                asynqmw.IsFailure(nil),
		RetryDelayFunc:           asynqmw.RetryDelay(nil), // a paused task comes back at the pause's end
		DelayedTaskCheckInterval: 100 * time.Millisecond,  // asynq's default 5s would add to the pause
		LogLevel:                 asynq.FatalLevel,
	})
	if err := srv.Start(mux); err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	client := asynq.NewClientFromRedisClient(rdb)
	defer client.Close()
	if _, err := client.Enqueue(asynq.NewTask("example:call", nil)); err != nil {
		panic(err)
	}
	fmt.Println(<-done)
	// Output:
	// call 2 succeeded; retries spent: 0
}
