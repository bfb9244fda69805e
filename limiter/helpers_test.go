package limiter_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// backend is one kind of Redis deployment the core tests must pass on.
type backend struct {
	kind   string
	client func(t testing.TB) redis.UniversalClient
	// ctxClient is a client with ContextTimeoutEnabled, on which the
	// Client calls Redis from the caller's goroutine.
	ctxClient func(t testing.TB) redis.UniversalClient
	calls     func(t testing.TB) map[string]int64
	reset     func(t testing.TB)
	env       []string // tells a child process how to connect
	// pause stops every node (SIGSTOP) until the returned resume.
	pause func(t testing.TB) (resume func())
}

func singleBackend(t testing.TB) backend {
	srv := redistest.StartServer(t)
	return backend{
		kind:   "single",
		client: func(t testing.TB) redis.UniversalClient { return srv.Client(t) },
		ctxClient: func(t testing.TB) redis.UniversalClient {
			return srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
		},
		calls: srv.CommandCalls,
		reset: srv.ResetStats,
		env:   []string{"REDSEM_TEST_ADDRS=" + srv.Addr()},
		pause: func(t testing.TB) func() {
			srv.Pause(t)
			return func() { srv.Resume(t) }
		},
	}
}

func clusterBackend(t testing.TB) backend {
	c := redistest.StartCluster(t, 3)
	return backend{
		kind:   "cluster",
		client: func(t testing.TB) redis.UniversalClient { return c.Client(t) },
		ctxClient: func(t testing.TB) redis.UniversalClient {
			return c.Client(t, func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true })
		},
		calls: c.CommandCalls,
		reset: c.ResetStats,
		env:   []string{"REDSEM_TEST_ADDRS=" + strings.Join(c.Addrs(), ","), "REDSEM_TEST_CLUSTER=1"},
		pause: func(t testing.TB) func() {
			for _, s := range c.Servers() {
				s.Pause(t)
			}
			return func() {
				for _, s := range c.Servers() {
					s.Resume(t)
				}
			}
		},
	}
}

// forEachBackend runs the core tests on a single node and on a 3-master
// Cluster; names there contain braces to prove the hash tag holds.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Run("single", func(t *testing.T) { fn(t, singleBackend(t)) })
	t.Run("cluster", func(t *testing.T) { fn(t, clusterBackend(t)) })
}

var nameSeq atomic.Int64

// uniqueName gives every test its own semaphore; on the cluster backend it
// has braces in it.
func uniqueName(b backend, base string) string {
	n := nameSeq.Add(1)
	if b.kind == "cluster" {
		return fmt.Sprintf("%s{%d}}{x", base, n)
	}
	return fmt.Sprintf("%s-%d", base, n)
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// keysMatching runs KEYS pattern on every master.
func keysMatching(t testing.TB, rdb redis.UniversalClient, pattern string) []string {
	t.Helper()
	var (
		mu    sync.Mutex
		found []string
	)
	scan := func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, pattern).Result()
		mu.Lock()
		found = append(found, keys...)
		mu.Unlock()
		return err
	}
	ctx := ctxT(t, 5*time.Second)
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return found
}

var clients sync.Map // "test name/rdb pointer" -> *limiter.Client

// clientFor returns the test's Client of rdb (one per rdb and test, like a
// process), closed when the test ends.
func clientFor(t testing.TB, rdb redis.UniversalClient, opts ...limiter.Option) *limiter.Client {
	t.Helper()
	key := fmt.Sprintf("%s/%p", t.Name(), rdb)
	if c, ok := clients.Load(key); ok {
		return c.(*limiter.Client)
	}
	c := redistest.Limiter(t, rdb, opts...)
	clients.Store(key, c)
	t.Cleanup(func() { clients.Delete(key) })
	return c
}

func newSemaphore(t testing.TB, rdb redis.UniversalClient, name string, limit int64, opts ...limiter.NameOption) (*limiter.Semaphore, error) {
	return clientFor(t, rdb).Semaphore(name, limit, opts...)
}

func newMutex(t testing.TB, rdb redis.UniversalClient, name string, opts ...limiter.NameOption) (*limiter.Semaphore, error) {
	return clientFor(t, rdb).Mutex(name, opts...)
}

// newRedlockClient makes a Redlock Client (NodeTimeout is the Client's),
// closed when the test ends.
func newRedlockClient(t testing.TB, nodes []redis.UniversalClient, opts ...limiter.Option) (*limiter.Client, error) {
	c, err := limiter.NewRedlock(nodes, append([]limiter.Option{limiter.RestartQuarantine(0)}, opts...)...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c, nil
}

// newRedlockSemaphore makes a Redlock Client per call (see
// newRedlockClient).
func newRedlockSemaphore(t testing.TB, nodes []redis.UniversalClient, name string, limit int64, opts ...limiter.Option) (*limiter.Semaphore, error) {
	c, err := newRedlockClient(t, nodes, opts...)
	if err != nil {
		return nil, err
	}
	return c.Semaphore(name, limit)
}

func newRedlockMutex(t testing.TB, nodes []redis.UniversalClient, name string, opts ...limiter.Option) (*limiter.Semaphore, error) {
	c, err := newRedlockClient(t, nodes, opts...)
	if err != nil {
		return nil, err
	}
	return c.Mutex(name)
}

// acquirer is what churn drives: a Semaphore or a Mutex.
type acquirer interface {
	Acquire(ctx context.Context, opts ...limiter.AcquireOption) (*limiter.Lease, error)
}

// churn runs per goroutines on each of acquirers, each acquiring,
// holding 1ms and releasing rounds times, and waits for them all; an
// error fails t.
func churn(t testing.TB, ctx context.Context, acquirers []acquirer, per, rounds int) {
	t.Helper()
	var wg sync.WaitGroup
	for _, a := range acquirers {
		for range per {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					l, err := a.Acquire(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					time.Sleep(time.Millisecond)
					if err := l.Release(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
}

// tryCycle takes mu with TryAcquire and releases it; an error fails t.
func tryCycle(t testing.TB, ctx context.Context, mu *limiter.Semaphore) {
	t.Helper()
	l, err := mu.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// ringOfTwo starts two servers and returns a maker of Rings over them
// (each closed when the test ends) and, per shard address, a name
// (prefix and a number) whose suffix key lives on that shard.
func ringOfTwo(t *testing.T, prefix, suffix string) (ring func() *redis.Ring, shards map[string]string) {
	t.Helper()
	addrs := map[string]string{}
	for _, s := range []string{"a", "b"} {
		addrs[s] = redistest.StartServer(t).Addr()
	}
	ring = func() *redis.Ring {
		r := redis.NewRing(&redis.RingOptions{Addrs: addrs})
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	r := ring()
	shards = map[string]string{} // shard address -> a name on it
	for i := 0; len(shards) < 2 && i < 100; i++ {
		name := fmt.Sprint(prefix, i)
		c, err := r.GetShardClientForKey(keyOf(name, suffix))
		if err != nil {
			t.Fatal(err)
		}
		shards[c.Options().Addr] = name
	}
	return ring, shards
}

// awaitRecorded waits until n Clients recorded the limit they apply to
// name (Inspector.InUse): the first record of each goes within about a
// second of its first use, and tests that count the script calls of an
// idle while must not count those.
func awaitRecorded(t testing.TB, rdb redis.UniversalClient, name string, n int) {
	t.Helper()
	insp := inspect.New(clientFor(t, rdb))
	redistest.Eventually(t, 10*time.Second, "every Client's limit in use recorded", func() bool {
		u, err := insp.InUse(ctxT(t, 5*time.Second), name)
		got := 0
		for _, l := range u.Limits {
			got += l.Processes
		}
		return err == nil && got >= n
	})
}
