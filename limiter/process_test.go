package limiter_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// The multi-process tests re-run this test binary as workers (runChild,
// runWaiterChild); the runnable Examples find their server in REDIS_ADDR.
func TestMain(m *testing.M) {
	waitBoundParallel()
	redistest.Main(m, map[string]func() int{"hammer": runChild, "waiter": runWaiterChild, "rater": runRateChild, "inuse": runInUseChild, "why": runWhyChild})
}

// waitBoundParallel runs 4 parallel tests at once unless -parallel is
// given: the default, GOMAXPROCS, is 2 on CI, and the tests marked
// parallel here mostly wait (servers starting, TTLs and failovers
// running out) rather than compute. Tests that judge a latency stay
// sequential.
func waitBoundParallel() {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", "4")
	}
}

func childClient() redis.UniversalClient {
	addrs := strings.Split(os.Getenv("REDSEM_TEST_ADDRS"), ",")
	if os.Getenv("REDSEM_TEST_CLUSTER") != "" {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	}
	return redis.NewClient(&redis.Options{Addr: addrs[0]})
}

// childNodes are the Redlock nodes; the observer counter lives on the
// first address (childClient).
func childNodes() []redis.UniversalClient {
	var nodes []redis.UniversalClient
	for _, a := range strings.Split(os.Getenv("REDSEM_TEST_ADDRS"), ",") {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: a}))
	}
	return nodes
}

// runChild hammers a semaphore from 8 goroutines. After each acquisition
// it adds its weight to an observer counter in Redis that the library does
// not know about, and counts a violation whenever that sum exceeds the
// limit: an independent check of the invariant across processes.
func runChild() int {
	rdb := childClient()
	defer rdb.Close()
	name := os.Getenv("REDSEM_NAME")
	limit, _ := strconv.ParseInt(os.Getenv("REDSEM_LIMIT"), 10, 64)
	bound := limit // what the observer holds the fleet to
	if fleet, _ := strconv.ParseInt(os.Getenv("REDSEM_FLEET"), 10, 64); fleet > 0 {
		bound = fleet
	}
	maxWeight, _ := strconv.ParseInt(os.Getenv("REDSEM_MAX_WEIGHT"), 10, 64)
	rounds, _ := strconv.Atoi(os.Getenv("REDSEM_ROUNDS"))
	obs, violations := "obs:{"+name+"}", "violations:{"+name+"}"
	opts := []limiter.Option{limiter.TTL(5 * time.Second), limiter.AcquireTimeout(time.Minute), limiter.RestartQuarantine(0)}
	var client *limiter.Client
	var err error
	if os.Getenv("REDSEM_TEST_REDLOCK") != "" {
		client, err = limiter.NewRedlock(childNodes(), opts...)
	} else {
		client, err = limiter.New(rdb, opts...)
	}
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx := context.Background()
	defer client.Close(ctx)
	sem, err := client.Semaphore(name, limit)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	var (
		mu       sync.Mutex
		acquired int
		peak     int64
		failed   error
		wg       sync.WaitGroup
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				w := 1 + rand.Int64N(maxWeight)
				opts := []limiter.AcquireOption{limiter.Weight(w)}
				if id := os.Getenv("REDSEM_ID"); id != "" {
					opts = append(opts, limiter.ID(id)) // one id, one holder
				}
				err := sem.Do(ctx, func(ctx context.Context) error {
					now, err := rdb.IncrBy(ctx, obs, w).Result()
					if err != nil {
						return err
					}
					if now > bound {
						rdb.Incr(ctx, violations)
					}
					mu.Lock()
					acquired++
					peak = max(peak, now)
					mu.Unlock()
					time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
					return rdb.DecrBy(ctx, obs, w).Err()
				}, opts...)
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if failed != nil {
		fmt.Println("error", failed)
		return 1
	}
	fmt.Printf("acquired=%d peak=%d\n", acquired, peak)
	return 0
}

func TestLimitHoldsAcrossProcesses(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		// The cases share no name, so they run side by side: the suite's
		// time matters more than the machine's idle cores (the torture
		// suite does the long runs).
		t.Run("limit3", func(t *testing.T) { t.Parallel(); runProcesses(t, b, 3, 1, "", 0) })
		t.Run("weighted1to5limit5", func(t *testing.T) { t.Parallel(); runProcesses(t, b, 5, 5, "", 0) })
		// Every worker of every process asks with one lease id: they must
		// take turns, never share the lease.
		t.Run("oneIDlimit3", func(t *testing.T) { t.Parallel(); runProcesses(t, b, 3, 1, "task-1", 0) })
		// Every process is made with a limit of 5; the stored fleet limit
		// of 2 binds them all.
		t.Run("fleet2own5", func(t *testing.T) { t.Parallel(); runProcesses(t, b, 5, 1, "", 2) })
	})
}

func runProcesses(t *testing.T, b backend, own, maxWeight int64, id string, fleet int64) {
	const procs = 3
	rounds := 30
	if b.kind == "redlock" { // every acquisition costs a round trip to each node
		rounds = 12
	}
	name := uniqueName(b, "procs")
	limit := own
	if fleet > 0 {
		limit = fleet
		sem, _ := newSemaphore(t, b.client(t), name, own)
		if err := setLimit(ctxT(t, 5*time.Second), sem, fleet); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	outs := make([]string, procs)
	errs := make([]error, procs)
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), b.env...)
		cmd.Env = append(cmd.Env, redistest.ChildEnv+"=hammer", "REDSEM_NAME="+name,
			fmt.Sprintf("REDSEM_LIMIT=%d", own), fmt.Sprintf("REDSEM_FLEET=%d", fleet), fmt.Sprintf("REDSEM_MAX_WEIGHT=%d", maxWeight),
			fmt.Sprintf("REDSEM_ROUNDS=%d", rounds), "REDSEM_ID="+id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.CombinedOutput()
			outs[i], errs[i] = string(out), err
		}()
	}
	wg.Wait()
	total, peak := 0, int64(0)
	for i := range procs {
		if errs[i] != nil {
			t.Fatalf("worker %d: %v\n%s", i, errs[i], outs[i])
		}
		var n int
		var p int64
		sc := bufio.NewScanner(strings.NewReader(outs[i]))
		for sc.Scan() {
			if _, err := fmt.Sscanf(sc.Text(), "acquired=%d peak=%d", &n, &p); err == nil {
				break
			}
		}
		total += n
		peak = max(peak, p)
	}
	rdb := b.client(t)
	ctx := ctxT(t, 5*time.Second)
	v, err := rdb.Get(ctx, "violations:{"+name+"}").Int64()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	if v != 0 || peak > limit {
		t.Fatalf("the observer saw more than %d permits in use %d times (peak %d)", limit, v, peak)
	}
	if total != procs*8*rounds {
		t.Fatalf("%d acquisitions, want %d", total, procs*8*rounds)
	}
	if id != "" {
		if peak != 1 {
			t.Fatalf("one lease id had %d holders at once\n%s", peak, strings.Join(outs, "\n"))
		}
	} else if peak < 2 {
		t.Fatalf("peak %d: the workers never overlapped, the test proves nothing", peak)
	}
	t.Logf("%d acquisitions by %d processes, observed peak %d of %d", total, procs, peak, limit)
}

// With Redis stopped (SIGSTOP) the holder must report loss from its own
// clock before the TTL has run out since its last confirmed refresh, so
// it stops before Redis could give the permit to someone else.
func TestLossWhileRedisPaused(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx := ctxT(t, 20*time.Second)
	const ttl = time.Second
	sem, err := newMutex(t, rdb, "paused", limiter.TTL(ttl), limiter.RefreshInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	l, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // a couple of confirmed refreshes
	paused := time.Now()
	srv.Pause(t)
	defer srv.Resume(t)
	select {
	case <-l.Context().Done():
	case <-time.After(3 * ttl):
		t.Fatal("no loss reported while Redis was unreachable")
	}
	if since := time.Since(paused); since >= ttl {
		t.Fatalf("loss reported %v after the pause: later than the TTL %v", since, ttl)
	}
	if !errors.Is(context.Cause(l.Context()), limiter.ErrLeaseLost) {
		t.Fatalf("cause: %v", context.Cause(l.Context()))
	}
}
