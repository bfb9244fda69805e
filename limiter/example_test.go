package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter"
)

// At most 5 calls to a rate-limited API at once, across every process that
// uses this Redis.
func ExampleSemaphore_Do() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	sem, err := limiter.NewSemaphore(rdb, "example:partner-api", 5)
	if err != nil {
		panic(err)
	}
	err = sem.Do(context.Background(), func(ctx context.Context) error {
		// ctx is cancelled (cause limiter.ErrLeaseLost) if the permit is lost.
		fmt.Println("calling the API")
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// calling the API
	// err: <nil>
}

// TryAcquire never waits: it reports a full semaphore with ErrBusy and says
// when to try again.
func ExampleSemaphore_TryAcquire() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	ctx := context.Background()

	mu, _ := limiter.NewMutex(rdb, "example:nightly-export")
	lease, err := mu.TryAcquire(ctx)
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)

	_, err = mu.TryAcquire(ctx)
	var busy *limiter.BusyError
	if errors.As(err, &busy) {
		fmt.Println("busy:", errors.Is(err, limiter.ErrBusy), "retry within TTL:", busy.RetryIn <= limiter.DefaultTTL)
	}
	// Output:
	// busy: true retry within TTL: true
}

// A cron process acquires, hands the ticket to a worker (e.g. in a task
// header), and the worker adopts the lease with its own TTL.
func ExampleSemaphore_Resume() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	ctx := context.Background()

	// Cron side: refresh off; the TTL covers the wait until pick-up.
	cron, _ := limiter.NewMutex(rdb, "example:report", limiter.TTL(time.Minute), limiter.RefreshInterval(0))
	lease, err := cron.TryAcquire(ctx)
	if err != nil {
		panic(err)
	}
	header := lease.Ticket().String()
	lease.StopRefresh()

	// Worker side.
	worker, _ := limiter.NewMutex(rdb, "example:report", limiter.TTL(10*time.Second))
	ticket, err := limiter.ParseTicket(header)
	if err != nil {
		panic(err)
	}
	adopted, err := worker.Resume(ctx, ticket)
	if err != nil {
		panic(err) // errors.Is(err, limiter.ErrNotHeld) when it expired before pick-up
	}
	fmt.Println("same lease:", adopted.Token() == lease.Token())
	fmt.Println("release:", adopted.Release(ctx))
	// Output:
	// same lease: true
	// release: <nil>
}

// Acquire waits (without polling) until a permit frees, AcquireTimeout
// passes, or ctx ends.
func ExampleSemaphore_Acquire() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	ctx := context.Background()

	sem, _ := limiter.NewSemaphore(rdb, "example:wait", 1, limiter.AcquireTimeout(5*time.Second))
	first, _ := sem.Acquire(ctx)
	go func() {
		time.Sleep(50 * time.Millisecond)
		first.Release(ctx)
	}()
	second, err := sem.Acquire(ctx) // woken by the release
	fmt.Println("acquired:", err == nil, "later token:", second.Token() > first.Token())
	second.Release(ctx)
	// Output:
	// acquired: true later token: true
}
