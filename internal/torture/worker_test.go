package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter"
)

// A worker is one process of a scenario: G goroutines that acquire,
// hold and release one semaphore until the parent says stop, logging
// every step to the observer.

const (
	workerRole = "torture-worker"
	configEnv  = "REDSEM_TORTURE_CONFIG"
	resultMark = "torture-result "
)

// workerConfig is everything a worker needs, passed as JSON in configEnv.
type workerConfig struct {
	Proc, Goroutines int
	// Addrs is the Redis under test: one node, the Redlock nodes, or the
	// sentinels of SentinelMaster.
	Addrs          []string
	Redlock        bool
	SentinelMaster string
	// Cluster: Addrs are the nodes of a Cluster.
	Cluster bool
	// CtxTimeout sets ContextTimeoutEnabled, which changes how the
	// limiter bounds its calls (the package doc): half the workers use it.
	CtxTimeout bool
	Name       string
	Limit      int64
	MaxWeight  int64
	// TTLs: each acquisition uses one at random (one Semaphore value per
	// TTL, same name), so holders with different TTLs share the permits.
	TTLs []time.Duration
	// Options names Client options in clientOptions.
	Options  []string
	Observer string
	Keys     observerKeys
	SHA      string // of the acquire script
	// LongHolder makes the first goroutine hold one permit at a time for
	// half a TTL to two, so that faults find holders whose leases span
	// them (the others mostly hold for milliseconds).
	LongHolder bool
	// Broken makes the worker ignore loss notices: it holds for the time
	// it meant to and logs a release, as a careless user would. It exists
	// to prove the check catches what it should.
	Broken bool
}

// clientOptions are the Client options a scenario can ask for by name
// (the tagged scenarios add theirs).
var clientOptions = map[string]func() limiter.Option{
	"allow-eviction": limiter.AllowEviction,
	"no-refresh":     func() limiter.Option { return limiter.RefreshInterval(0) },
	"no-quarantine":  func() limiter.Option { return limiter.RestartQuarantine(0) },
	"wait-replicas":  func() limiter.Option { return limiter.WaitReplicas(1, time.Second) },
}

// workerResult is what a worker reports on its last line of output.
type workerResult struct {
	Proc           int
	Acquired, Lost int            // as the log must show them
	Errors         map[string]int // by kind
	// Acquire script calls per Acquire that had to wait (Waits): Redis
	// answered "no room" or more than one attempt was made. On Redlock
	// one attempt is one call per node.
	Calls        int64
	Waits        int
	WaitAttempts float64
	MaxAttempts  float64
	// Samples holds the first error of each kind, for diagnostics.
	Samples map[string]string
}

func runChild() int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "torture worker: config:", err)
		return 2
	}
	res, err := work(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "torture worker %d: %v\n", cfg.Proc, err)
		return 1
	}
	out, _ := json.Marshal(res)
	fmt.Println(resultMark + string(out))
	return 0
}

func (cfg workerConfig) redisClients() (rdb redis.UniversalClient, nodes []redis.UniversalClient) {
	hook := attemptHook{sha: cfg.SHA}
	opts := func(addr string) *redis.Options {
		return &redis.Options{Addr: addr, ContextTimeoutEnabled: cfg.CtxTimeout}
	}
	switch {
	case cfg.Redlock:
		for _, a := range cfg.Addrs {
			n := redis.NewClient(opts(a))
			n.AddHook(hook)
			nodes = append(nodes, n)
		}
		return nil, nodes
	case cfg.SentinelMaster != "":
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: cfg.SentinelMaster, SentinelAddrs: cfg.Addrs,
			ContextTimeoutEnabled: cfg.CtxTimeout})
		c.AddHook(hook)
		return c, nil
	}
	if cfg.Cluster {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.Addrs, ContextTimeoutEnabled: cfg.CtxTimeout})
		// On the node clients: the WaitReplicas pipelines go there.
		c.OnNewNode(func(n *redis.Client) { n.AddHook(hook) })
		return c, nil
	}
	c := redis.NewClient(opts(cfg.Addrs[0]))
	c.AddHook(hook)
	return c, nil
}

func work(cfg workerConfig) (*workerResult, error) {
	obs := newObserver(cfg.Observer, cfg.Keys)
	defer obs.rdb.Close()
	rdb, nodes := cfg.redisClients()
	opts := []limiter.Option{
		limiter.AcquireTimeout(4 * time.Second),
		// What the limiter asks of Clients whose semaphores' TTLs differ:
		// after an empty restart, grant nothing for the longest.
		limiter.RestartQuarantine(slices.Max(cfg.TTLs)),
		// Loss is logged at Warn for every lost lease: the log records it.
		limiter.Logger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))),
	}
	for _, name := range cfg.Options {
		o, ok := clientOptions[name]
		if !ok {
			return nil, fmt.Errorf("unknown option %q", name)
		}
		opts = append(opts, o())
	}
	var client *limiter.Client
	var err error
	if cfg.Redlock {
		client, err = limiter.NewRedlock(nodes, opts...)
		defer closeAll(nodes)
	} else {
		client, err = limiter.New(rdb, opts...)
		defer rdb.Close()
	}
	if err != nil {
		return nil, err
	}
	defer client.Close(context.Background())
	sems := make([]*limiter.Semaphore, len(cfg.TTLs))
	for i, ttl := range cfg.TTLs {
		if sems[i], err = client.Semaphore(cfg.Name, cfg.Limit, limiter.TTL(ttl)); err != nil {
			return nil, err
		}
	}

	ctx := context.Background()
	stop, err := startWhenTold(ctx, obs)
	if err != nil {
		return nil, err
	}
	w := &worker{cfg: cfg, obs: obs, sems: sems, res: workerResult{Proc: cfg.Proc, Errors: map[string]int{}, Samples: map[string]string{}}, stop: stop}
	var wg sync.WaitGroup
	for g := range cfg.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(g == 0 && cfg.LongHolder)
		}()
	}
	wg.Wait()
	if w.err != nil {
		return nil, w.err
	}
	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Close(closeCtx); err != nil {
		w.res.Errors["close"]++
	}
	return &w.res, nil
}

func closeAll(cs []redis.UniversalClient) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// startWhenTold reports the worker ready and returns once the parent says
// go, with a context that ends when the parent says stop.
func startWhenTold(ctx context.Context, obs *observer) (context.Context, error) {
	if err := obs.rdb.Incr(ctx, obs.keys.Ready).Err(); err != nil {
		return nil, err
	}
	if err := waitKey(ctx, obs, obs.keys.Go, time.Minute); err != nil {
		return nil, err
	}
	stop, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		_ = waitKey(ctx, obs, obs.keys.Stop, time.Hour)
	}()
	return stop, nil
}

func waitKey(ctx context.Context, obs *observer, key string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		n, err := obs.rdb.Exists(ctx, key).Result()
		if err != nil {
			return err
		}
		if n == 1 {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("no %s within %v", key, within)
}

type worker struct {
	cfg  workerConfig
	obs  *observer
	sems []*limiter.Semaphore
	stop context.Context

	mu  sync.Mutex
	res workerResult
	err error // of the observer: the log would be incomplete
}

func (w *worker) failed(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

func (w *worker) tally(f func(r *workerResult)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(&w.res)
}

func (w *worker) loop(long bool) {
	ctx := context.Background() // the observer's calls outlive stop
	for w.stop.Err() == nil {
		if err := w.once(ctx, long); err != nil {
			w.failed(err)
			return
		}
	}
}

// once makes one acquisition; it returns only the observer's errors.
func (w *worker) once(ctx context.Context, long bool) error {
	weight := 1 + rand.Int64N(w.cfg.MaxWeight)
	i := rand.IntN(len(w.sems))
	sem := w.sems[i]
	hold := holdTime()
	switch {
	case long:
		weight = 1
		ttl := w.cfg.TTLs[i]
		hold = ttl/2 + rand.N(ttl*3/2)
	case w.cfg.Broken:
		// Long enough to outlive its lease, which is the point, and the
		// second a waiter may take to learn that an expired lease (one
		// not released) made room: its queue entry's keep-alive.
		hold = slices.Max(w.cfg.TTLs) + 2*time.Second
	}
	attempt, err := w.obs.attempt(ctx)
	if err != nil {
		return err
	}
	var t tally
	l, err := sem.Acquire(withTally(w.stop, &t), limiter.Weight(weight))
	w.count(&t, err)
	if err != nil {
		if w.stop.Err() == nil && !errors.Is(err, limiter.ErrTimeout) {
			// Redis is down or refusing: not our loop to make busy.
			time.Sleep(time.Duration(20+rand.IntN(30)) * time.Millisecond)
		}
		return nil
	}
	id := l.ID()
	if err := w.obs.grant(ctx, record{proc: w.cfg.Proc, lease: id, weight: weight, token: l.Token(), attempt: attempt, hold: hold}); err != nil {
		return err
	}
	timer := time.NewTimer(hold)
	defer timer.Stop()
	done := l.Context().Done()
	if w.cfg.Broken {
		done = nil // never told
	}
	select {
	case <-done:
		w.tally(func(r *workerResult) { r.Lost++ })
		return w.obs.end(ctx, 'L', w.cfg.Proc, id)
	case <-timer.C:
	case <-w.stop.Done(): // the run is over: no need to finish
	}
	// Logged before the release is sent: from here on the worker holds
	// nothing it could use.
	if err := w.obs.end(ctx, 'R', w.cfg.Proc, id); err != nil {
		return err
	}
	err = l.Release(ctx)
	if err != nil {
		w.tally(func(r *workerResult) { r.failed("release", err) })
	}
	return nil
}

// holdTime: mostly a few milliseconds, so permits change hands often;
// one in twenty-five up to a second, the time of a refresh or two.
func holdTime() time.Duration {
	if rand.IntN(25) == 0 {
		return 300*time.Millisecond + rand.N(900*time.Millisecond)
	}
	return rand.N(10 * time.Millisecond)
}

func (w *worker) count(t *tally, err error) {
	nodes := 1
	if w.cfg.Redlock {
		nodes = len(w.cfg.Addrs)
	}
	calls := t.calls.Load()
	attempts := float64(calls) / float64(nodes)
	w.tally(func(r *workerResult) {
		r.Calls += calls
		if calls > int64(nodes) || t.busy.Load() {
			r.Waits++
			r.WaitAttempts += attempts
			r.MaxAttempts = max(r.MaxAttempts, attempts)
		}
		switch {
		case err == nil:
			r.Acquired++
		case w.stop.Err() != nil:
			// Cancelled by the stop: not an error of the run.
		default:
			r.failed("acquire", err)
		}
	})
}

func (r *workerResult) failed(op string, err error) {
	k := op + ": " + kind(err)
	if r.Errors[k]++; r.Errors[k] == 1 {
		r.Samples[k] = err.Error()
	}
}

// kind names an error for the report.
func kind(err error) string {
	switch {
	case errors.Is(err, limiter.ErrTimeout):
		return "timeout"
	case errors.Is(err, limiter.ErrEvictingRedis):
		return "evicting"
	case errors.Is(err, limiter.ErrNotHeld):
		return "not held"
	case errors.Is(err, limiter.ErrNotReplicated):
		return "not replicated"
	case strings.Contains(err.Error(), "OOM"):
		return "OOM"
	}
	return "redis"
}
