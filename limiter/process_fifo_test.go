package limiter_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// runWaiterChild waits on the mutex REDSEM_NAME with REDSEM_WAITERS
// goroutines (no timeout). Each, once granted, appends REDSEM_TAG to the
// list order:{name} (the grant order, seen by Redis), holds REDSEM_HOLD_MS
// and releases.
func runWaiterChild() int {
	rdb := childClient()
	defer rdb.Close()
	name := os.Getenv("REDSEM_NAME")
	waiters, _ := strconv.Atoi(os.Getenv("REDSEM_WAITERS"))
	hold, _ := strconv.Atoi(os.Getenv("REDSEM_HOLD_MS"))
	client, err := limiter.New(rdb, limiter.AcquireTimeout(0), limiter.RestartQuarantine(0))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx := context.Background()
	defer client.Close(ctx)
	mu, err := client.Mutex(name)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	var wg sync.WaitGroup
	var failed error
	var once sync.Once
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := mu.Do(ctx, func(ctx context.Context) error {
				if err := rdb.RPush(ctx, "order:{"+name+"}", os.Getenv("REDSEM_TAG")).Err(); err != nil {
					return err
				}
				time.Sleep(time.Duration(hold) * time.Millisecond)
				return nil
			})
			if err != nil {
				once.Do(func() { failed = err })
			}
		}()
	}
	wg.Wait()
	if failed != nil {
		fmt.Println("error", failed)
		return 1
	}
	return 0
}

// startWaiters starts a waiter process and returns it running.
func startWaiters(t *testing.T, b backend, name, tag string, waiters, holdMS int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), b.env...)
	cmd.Env = append(cmd.Env, redistest.ChildEnv+"=waiter", "REDSEM_NAME="+name, "REDSEM_TAG="+tag,
		"REDSEM_WAITERS="+strconv.Itoa(waiters), "REDSEM_HOLD_MS="+strconv.Itoa(holdMS))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// Processes that join a held mutex one after another are granted in that
// order: the queue is in Redis, not in each process.
func TestArrivalOrderAcrossProcesses(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 60*time.Second)
		name := uniqueName(b, "order")
		rdb := b.client(t)
		mu, _ := newMutex(t, rdb, name)
		held, err := mu.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		const procs = 4
		var cmds []*exec.Cmd
		for i := range procs {
			cmds = append(cmds, startWaiters(t, b, name, strconv.Itoa(i), 1, 20))
			redistest.Eventually(t, 20*time.Second, "process "+strconv.Itoa(i)+" queued", func() bool {
				return rdb.ZCard(ctx, queueKey(name)).Val() == int64(i+1)
			})
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Fatal(err)
			}
		}
		order := rdb.LRange(ctx, "order:{"+name+"}", 0, -1).Val()
		if fmt.Sprint(order) != "[0 1 2 3]" {
			t.Fatalf("granted in the order %v, want the arrival order [0 1 2 3]", order)
		}
	})
}

// A waiter whose process is killed holds the queue up only until its
// entry expires (queueTTL, no keep-alive any more): the next process is
// granted within a few seconds, not never.
func TestKilledWaiterLeavesTheQueue(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 60*time.Second)
	name := uniqueName(b, "killed")
	rdb := b.client(t)
	mu, _ := newMutex(t, rdb, name)
	held, err := mu.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dead := startWaiters(t, b, name, "dead", 1, 0)
	redistest.Eventually(t, 20*time.Second, "the doomed waiter queued", func() bool {
		return rdb.ZCard(ctx, queueKey(name)).Val() == 1
	})
	alive := startWaiters(t, b, name, "alive", 1, 0)
	redistest.Eventually(t, 20*time.Second, "the second waiter queued", func() bool {
		return rdb.ZCard(ctx, queueKey(name)).Val() == 2
	})
	if err := dead.Process.Kill(); err != nil { // SIGKILL: no leave, no keep-alive
		t.Fatal(err)
	}
	_ = dead.Wait()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	done := make(chan error, 1)
	go func() { done <- alive.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter behind a killed one was not granted within 10s")
	}
	took := time.Since(released)
	if took > queueTTLForTest+2*time.Second { // + a keep-alive round + slack
		t.Fatalf("the waiter behind a killed one waited %v", took)
	}
	t.Logf("granted %v after the release (the killed waiter's entry expired)", took)
}

// queueTTLForTest mirrors limiter's queueTTL (3s): a queue entry not kept
// alive is gone by then.
const queueTTLForTest = 3 * time.Second

// 1,000 waiters in 8 processes on a held mutex: waiting costs one
// keep-alive per process and second, and a release one release script
// (which grants the next waiter its lease directly) and one PUBLISH.
func TestThousandWaitersAcrossProcesses(t *testing.T) {
	t.Parallel()
	b := singleBackend(t)
	ctx := ctxT(t, 120*time.Second)
	name := uniqueName(b, "thousand")
	rdb := b.client(t)
	mu, _ := newMutex(t, rdb, name)
	held, err := mu.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const procs, per = 8, 125
	var cmds []*exec.Cmd
	for i := range procs {
		cmds = append(cmds, startWaiters(t, b, name, strconv.Itoa(i), per, 5000))
	}
	redistest.Eventually(t, 60*time.Second, "1,000 waiters queued", func() bool {
		return rdb.ZCard(ctx, queueKey(name)).Val() == procs*per
	})
	awaitRecorded(t, rdb, name, procs+1)
	b.reset(t)
	const idle = 3 * time.Second
	time.Sleep(idle)
	calls := b.calls(t)
	if scripts := redistest.Scripts(calls); scripts > procs*int64(idle/time.Second+1) {
		t.Fatalf("%d script calls in %v while %d waiters in %d processes wait; want at most one keep-alive per process and second",
			scripts, idle, procs*per, procs)
	}
	b.reset(t)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, "the next holder", func() bool {
		return rdb.LLen(ctx, "order:{"+name+"}").Val() >= 1
	})
	calls = b.calls(t)
	// The release, which grants the next waiter its lease directly (the
	// next holder holds on for 5s), plus keep-alives that fell due
	// meanwhile.
	if redistest.Publishes(calls) > 1 || redistest.Scripts(calls) > 1+procs {
		t.Fatalf("one release with %d waiters: %d PUBLISH, %d script calls", procs*per, redistest.Publishes(calls), redistest.Scripts(calls))
	}
	for _, c := range cmds {
		_ = c.Process.Kill()
	}
}

// A request for every permit is granted within the holds ahead of it while
// 4 processes keep asking for one permit each: strict FIFO, nobody
// overtakes it.
func TestHeavyRequestNotStarvedAcrossProcesses(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 60*time.Second)
		name := uniqueName(b, "heavy")
		rdb := b.client(t)
		const limit = 3
		for range 4 {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), b.env...)
			cmd.Env = append(cmd.Env, redistest.ChildEnv+"=hammer", "REDSEM_NAME="+name, "REDSEM_LIMIT=3",
				"REDSEM_MAX_WEIGHT=1", "REDSEM_ROUNDS=400")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		}
		redistest.Eventually(t, 20*time.Second, "the light requests flowing", func() bool {
			hs, err := holders(ctx, newSemaphoreOrFail(t, rdb, name, limit))
			return err == nil && len(hs) > 0
		})
		sem := newSemaphoreOrFail(t, rdb, name, limit)
		start := time.Now()
		l, err := sem.Acquire(ctx, limiter.Weight(limit))
		if err != nil {
			t.Fatalf("Weight(%d) among 4 processes of weight-1 requests: %v after %v", limit, err, time.Since(start))
		}
		waited := time.Since(start)
		_ = l.Release(ctx)
		redistest.Eventually(t, 2*time.Second, "the light requests still flowing after the heavy one", func() bool {
			hs, err := holders(ctx, sem)
			return err == nil && len(hs) > 0
		})
		if waited > time.Second { // without the queue: 9-10s, or never
			t.Fatalf("Weight(%d) waited %v behind 1-permit requests of 1-2ms each", limit, waited)
		}
		t.Logf("Weight(%d) granted after %v while 4 processes asked for 1 permit each", limit, waited)
	})
}

func newSemaphoreOrFail(t *testing.T, rdb redis.UniversalClient, name string, limit int64) *limiter.Semaphore {
	t.Helper()
	s, err := newSemaphore(t, rdb, name, limit, limiter.AcquireTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
