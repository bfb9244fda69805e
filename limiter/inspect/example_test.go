package inspect_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// The examples run against a real Redis that TestMain starts.
func TestMain(m *testing.M) { redistest.Main(m, nil) }

// An operator's view: the names in use, who holds one, and a fleet-wide
// limit that every process's Semaphore of that name obeys at once.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	client, _ := limiter.New(rdb)
	defer client.Close(context.Background())
	ctx := context.Background()

	sem, _ := client.Semaphore("example:inspected", 5)
	lease, err := sem.Acquire(ctx, limiter.Weight(2), limiter.ID("worker-1"))
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)

	in := inspect.New(client)
	names, _ := in.Names(ctx, "example:insp*")
	holders, _ := in.Holders(ctx, "example:inspected")
	if err := in.SetLimit(ctx, "example:inspected", 3); err != nil {
		panic(err)
	}
	limit, _ := in.Limit(ctx, "example:inspected")
	_ = in.SetLimit(ctx, "example:inspected", 0) // clear it: each process's own limit again
	fmt.Println(names, holders[0].ID, holders[0].Weight, limit)
	// Output:
	// [example:inspected] worker-1 2 3
}

// A 429 with Retry-After: pause the name for every process; their events
// resume at its end, paced, not as a burst.
func ExampleInspector_Pause() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	client, _ := limiter.New(rdb)
	defer client.Close(context.Background())

	ctx := context.Background()
	left, err := inspect.New(client).Pause(ctx, "example:paused-api", 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("paused for about", left.Round(time.Second))
	_ = inspect.New(client).Unpause(ctx, "example:paused-api")
	// Output:
	// paused for about 30s
}

// What a name runs at when its limit and rate live only in code: each
// Client records them with its keep-alive, within a second of their first
// use, and the Inspector counts the processes that apply each.
func ExampleInspector_InUse() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	client, _ := limiter.New(rdb)
	defer client.Close(context.Background())
	ctx := context.Background()

	sem, _ := client.Semaphore("example:in-use", 5)
	lease, err := sem.Acquire(ctx)
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	rl, _ := client.RateLimit("example:in-use", limiter.Rate{Events: 18, Per: time.Second, Burst: 1})
	if err := rl.Wait(ctx); err != nil {
		panic(err)
	}
	time.Sleep(1200 * time.Millisecond) // the first record goes within a second

	u, err := inspect.New(client).InUse(ctx, "example:in-use")
	if err != nil {
		panic(err) // a Redis failure, wrapped; ctx's end; ErrClosed
	}
	fmt.Println("fleet limit:", u.FleetLimit)
	for _, l := range u.Limits {
		fmt.Printf("limit %d (%d processes)\n", l.Limit, l.Processes)
	}
	for _, r := range u.Rates {
		fmt.Printf("rate %v (%d processes)\n", r.Rate, r.Processes)
	}
	// Output:
	// fleet limit: 0
	// limit 5 (1 processes)
	// rate 18/1s burst 1 (1 processes)
}
