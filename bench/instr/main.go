// Command instr is the probe bench/instr/run.sh runs under callgrind.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter"
)

// The probe instr/run.sh runs: n calls of one library against one
// redis-server, after 200 to warm up.
func main() {
	addr := flag.String("addr", "127.0.0.1:6399", "")
	lib := flag.String("lib", "redsem", "")
	n := flag.Int("n", 20000, "")
	flag.Parse()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: *addr, ContextTimeoutEnabled: true})
	r := limiter.Rate{Events: 1_000_000, Per: time.Second, Burst: 1_000_000}
	var call func() error
	switch *lib {
	case "redsem": // RateLimit.Allow
		c, err := limiter.New(rdb)
		if err != nil {
			panic(err)
		}
		rl, err := c.RateLimit("cg", r)
		if err != nil {
			panic(err)
		}
		call = func() error { _, err := rl.Allow(ctx); return err }
	case "redis_rate":
		l := redis_rate.NewLimiter(rdb)
		lim := redis_rate.Limit{Rate: int(r.Events), Burst: int(r.Burst), Period: r.Per}
		call = func() error { _, err := l.Allow(ctx, "cg", lim); return err }
	case "semaphore": // an uncontended Acquire and Release
		c, err := limiter.New(rdb)
		if err != nil {
			panic(err)
		}
		sem, err := c.Semaphore("cgsem", 5)
		if err != nil {
			panic(err)
		}
		call = func() error {
			l, err := sem.Acquire(ctx)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}
	case "contended", "contended8": // n acquisitions of a mutex by Clients in turn
		ms := []*limiter.Semaphore{mutexOf(rdb), mutexOf(rdb)}
		if *lib == "contended8" { // 7 in the queue behind each lease
			for range 6 {
				ms = append(ms, mutexOf(rdb))
			}
		}
		runContended(ctx, ms, 200)
		rdb.ConfigResetStat(ctx)
		runContended(ctx, ms, *n)
		s, _ := rdb.Info(ctx, "commandstats").Result()
		fmt.Println(s)
		return
	case "redislock": // an uncontended Obtain and Release
		lc := redislock.New(rdb)
		call = func() error {
			l, err := lc.Obtain(ctx, "cglock", 10*time.Second, nil)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}
	case "floor": // two FCALLs of a function that does nothing, with an
		// acquire's and a release's keys and arguments: what any cycle of
		// two scripts costs before its first line
		if err := rdb.FunctionLoadReplace(ctx, "#!lua name=cgfloor\n"+
			"redis.register_function('cgnoop', function(keys, args) return 1 end)").Err(); err != nil {
			panic(err)
		}
		keys := []string{"a{x}", "b{x}", "c{x}", "d{x}"}
		acq := []any{"1", "1", "10000", "id", "", "owner", "", "wait", "3000", "redsem:wake:owner", "1", "1", "0", "0"}
		rel := []any{"id", "", "redsem:wake:owner", "1", "0"}
		call = func() error {
			if err := rdb.FCall(ctx, "cgnoop", keys, acq...).Err(); err != nil {
				return err
			}
			return rdb.FCall(ctx, "cgnoop", keys, rel...).Err()
		}
	case "ping":
		call = func() error { return rdb.Ping(ctx).Err() }
	}
	for i := 0; i < 200; i++ {
		call()
	}
	rdb.ConfigResetStat(ctx)
	for i := 0; i < *n; i++ {
		if err := call(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	s, _ := rdb.Info(ctx, "commandstats").Result()
	fmt.Println(s)
}

func mutexOf(rdb *redis.Client) *limiter.Semaphore {
	c, err := limiter.New(rdb, limiter.RestartQuarantine(0))
	if err != nil {
		panic(err)
	}
	m, err := c.Semaphore("cgmutex", 1)
	if err != nil {
		panic(err)
	}
	return m
}

// runContended has ms (each of its own Client, as processes would be) take
// a mutex n times in all, each acquiring again as soon as it released and
// holding its lease 5 ms, time enough for the others' attempts to queue
// even under valgrind: each acquisition but the first queues behind
// another's lease and is granted by its release, the contended cycle.
func runContended(ctx context.Context, ms []*limiter.Semaphore, n int) {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				l, err := m.Acquire(ctx)
				if err != nil {
					panic(err)
				}
				time.Sleep(5 * time.Millisecond)
				if err := l.Release(ctx); err != nil {
					panic(err)
				}
			}
		}()
	}
	wg.Wait()
}
