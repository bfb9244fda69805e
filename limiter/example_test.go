package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// One Client per Redis deployment and process: it owns the keep-alive,
// the one wake-up connection and the leases, and Close gives them back.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	client, err := limiter.New(rdb, limiter.TTL(30*time.Second))
	if err != nil {
		panic(err)
	}
	defer client.Close(context.Background()) // before rdb.Close: deferred calls run last-in first-out

	sem, err := client.Semaphore("example:partner-api", 5)
	if err != nil {
		panic(err)
	}
	fmt.Println(sem.Name(), sem.Limit())
	// Output:
	// example:partner-api 5
}

// At most 5 calls to a rate-limited API at once, across every process that
// uses this Redis.
func ExampleSemaphore_Do() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	client, _ := limiter.New(rdb)
	defer client.Close(context.Background())

	sem, err := client.Semaphore("example:partner-api", 5)
	if err != nil {
		panic(err)
	}
	err = sem.Do(context.Background(), func(ctx context.Context) error {
		// ctx is cancelled (cause limiter.ErrLeaseLost) if the permit is
		// lost; the lease's fencing token is at hand.
		lease, _ := limiter.LeaseFrom(ctx)
		fmt.Println("calling the API with token > 0:", lease.Token() > 0)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// calling the API with token > 0: true
	// err: <nil>
}

// TryAcquire never waits: it reports a full semaphore with ErrBusy and says
// when to try again.
func ExampleSemaphore_TryAcquire() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	client, _ := limiter.New(rdb)
	defer client.Close(context.Background())
	ctx := context.Background()

	mu, _ := client.Mutex("example:nightly-export")
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

// A cron process acquires and hands the ticket to a worker (e.g. in a task
// header); the worker takes the lease over with its own TTL and a new
// fencing token.
func ExampleSemaphore_Resume() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	ctx := context.Background()

	// Cron side: refresh off; the TTL covers the wait until pick-up.
	cronClient, _ := limiter.New(rdb)
	defer cronClient.Close(ctx)
	cron, _ := cronClient.Mutex("example:report", limiter.TTL(10*time.Second), limiter.RefreshInterval(0))
	lease, err := cron.TryAcquire(ctx)
	if err != nil {
		panic(err)
	}
	header := lease.Ticket().String()

	// Worker side (another process).
	workerClient, _ := limiter.New(rdb)
	defer workerClient.Close(ctx)
	worker, _ := workerClient.Mutex("example:report", limiter.TTL(10*time.Second))
	ticket, err := limiter.ParseTicket(header)
	if err != nil {
		panic(err)
	}
	adopted, err := worker.Resume(ctx, ticket)
	if err != nil {
		panic(err) // errors.Is(err, limiter.ErrNotHeld) when it expired before pick-up
	}
	fmt.Println("newer token:", adopted.Token() > lease.Token())
	fmt.Println("release:", adopted.Release(ctx))
	// Output:
	// newer token: true
	// release: <nil>
}

// Acquire waits (without polling) until a permit frees and it is its
// turn, AcquireTimeout passes, or ctx ends.
func ExampleSemaphore_Acquire() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	client, _ := limiter.New(rdb)
	defer client.Close(context.Background())
	ctx := context.Background()

	sem, _ := client.Semaphore("example:wait", 1, limiter.AcquireTimeout(5*time.Second))
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

// Park keeps a lease's permits for whoever continues the work later: a
// retry, say, that knows only the ticket the first run started from.
func ExampleLease_Park() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	ctx := context.Background()
	client, _ := limiter.New(rdb)
	defer client.Close(ctx)
	mu, _ := client.Mutex("example:park")

	run, err := mu.TryAcquire(ctx, limiter.ID("job-42"))
	if err != nil {
		panic(err)
	}
	ticket := run.Ticket()
	// The run failed; keep the lock a minute for its retry.
	if err := run.Park(ctx, time.Minute); err != nil {
		panic(err)
	}
	_, err = mu.TryAcquire(ctx)
	fmt.Println("others:", err != nil)

	retry, err := mu.Resume(ctx, ticket) // the parked lease has another token by now
	if err != nil {
		panic(err)
	}
	fmt.Println("newer token:", retry.Token() > ticket.Token)
	fmt.Println("release:", retry.Release(ctx))
	// Output:
	// others: true
	// newer token: true
	// release: <nil>
}

// At most 100 calls a minute (burst 20) to a third-party API, across
// every process that uses this Redis: each Wait reserves its call's time
// in Redis and sleeps until then.
func ExampleRateLimit_Wait() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	client, _ := limiter.New(rdb)
	defer client.Close(context.Background())

	rl, err := client.RateLimit("example:partner-api", limiter.Rate{Events: 100, Per: time.Minute, Burst: 20})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rl.Wait(ctx); err != nil {
		// ErrBusy (with the wait in *BusyError's RetryIn) when the call's
		// time would come after ctx's deadline or AcquireTimeout.
		fmt.Println("not now:", err)
		return
	}
	fmt.Println("calling the API")
	// Output:
	// calling the API
}

// A partner API's real rate is unknown: the code sets the most it may
// take (100/s), and the fleet learns the rest from its answers. Each 429
// is told once (Inspector.Overload; httplimit and asynqmw do it), and
// the rate every process applies is cut for the whole fleet.
func ExampleAdaptive() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	client, _ := limiter.New(rdb)
	defer client.Close(context.Background())
	ctx := context.Background()

	rl, err := client.RateLimit("example:learned", limiter.Rate{Events: 100, Per: time.Second, Burst: 1},
		limiter.Adaptive(1, 50)) // from 50/s, between 1/s and 100/s
	if err != nil {
		panic(err)
	}
	_ = rl.Wait(ctx) // the first event starts the learning
	// The API answered 429 with Retry-After: 1.
	if _, err := inspect.New(client).Overload(ctx, "example:learned", time.Second); err != nil {
		panic(err)
	}
	st, _ := inspect.New(client).Rate(ctx, "example:learned")
	fmt.Printf("%d/s learned (bounds %d..%d), last overload at %.0f/s\n", st.Fleet.Events, st.Learned.Min, st.Learned.Max, st.Learned.Overload)
	// Output:
	// 35/s learned (bounds 1..100), last overload at 48/s
}
