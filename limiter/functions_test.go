package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// A Cluster whose one master lost the library: the pipelined refresh of
// leases on every master re-sends only that master's calls, which load it
// there, and every lease stays held.
func TestClusterRefreshWhereOneMasterLacksTheLibrary(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	var mu sync.Mutex
	var fcalls, fails int
	cc.AddHook(pipeHook{func(cmds []redis.Cmder) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range cmds {
			if c.Name() == "fcall" {
				fcalls++
				if c.Err() != nil {
					fails++
				}
			}
		}
	}})
	c := clientFor(t, cc, limiter.TTL(1500*time.Millisecond))
	var leases []*limiter.Lease
	for i := range 12 {
		sem, err := c.Semaphore(fmt.Sprint("pipe-", i), 2)
		if err != nil {
			t.Fatal(err)
		}
		l, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	// The first master ForEachMaster visits loses the library.
	var flushed sync.Once
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		var err error
		flushed.Do(func() { err = c.FunctionFlush(ctx).Err() })
		return err
	}); err != nil {
		t.Fatal(err)
	}
	cl.ResetStats(t)
	time.Sleep(3 * time.Second)
	for i, l := range leases {
		if err := l.Err(); err != nil {
			t.Fatalf("lease %d: %v", i, err)
		}
	}
	calls := cl.CommandCalls(t)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("pipelined fcalls %d, failed %d; calls %v", fcalls, fails, calls)
	if calls["function|load"] != 3 {
		t.Fatalf("function|load %d, want one load on each of 3 masters", calls["function|load"])
	}
	if fcalls == 0 || fails == 0 || fails >= fcalls {
		t.Fatalf("pipelined fcalls %d failed %d: expected only the flushed master's to fail", fcalls, fails)
	}
}

type pipeHook struct{ after func([]redis.Cmder) }

func (h pipeHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h pipeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h pipeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.after(cmds)
		return err
	}
}

// A load that fails slowly (one shard of a Ring partitioned: FUNCTION
// LOAD there waits for ReadTimeout) answers for the calls queued behind
// it: they fall back to EVALSHA at once rather than each loading again
// in turn until their ctx runs out.
func TestLoadFailingOnOneShardDoesNotQueueCalls(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	a := redistest.StartServer(t)
	b := redistest.StartServer(t)
	px := redistest.StartProxy(t, b.Addr())
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:              map[string]string{"a": a.Addr(), "b": px.Addr()},
		ReadTimeout:        time.Second,
		WriteTimeout:       time.Second,
		DialTimeout:        time.Second,
		HeartbeatFrequency: time.Hour,
		PoolSize:           16,
	})
	t.Cleanup(func() { _ = ring.Close() })
	c := clientFor(t, ring)
	var mus []*limiter.Semaphore
	for i := 0; len(mus) < 11; i++ {
		name := fmt.Sprint("ring-", i)
		shard, err := ring.GetShardClientForKey(queueKey(name))
		if err != nil {
			t.Fatal(err)
		}
		if shard.Options().Addr != a.Addr() {
			continue
		}
		mu, err := c.Mutex(name)
		if err != nil {
			t.Fatal(err)
		}
		mus = append(mus, mu)
	}
	l, err := mus[0].TryAcquire(ctx) // loads the library on both shards
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Client(t).FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	px.Blackhole()
	defer px.Heal()
	a.ResetStats(t)
	var wg sync.WaitGroup
	errs := make(chan error, len(mus))
	start := make(chan struct{})
	for _, mu := range mus[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			cctx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
			defer cancel()
			began := time.Now()
			l, err := mu.TryAcquire(cctx)
			if err != nil {
				errs <- fmt.Errorf("after %v: %w", time.Since(began).Round(time.Millisecond), err)
				return
			}
			_ = l.Release(ctx)
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	var failed []error
	for err := range errs {
		failed = append(failed, err)
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d acquires on the healthy shard failed: %v", len(failed), len(mus)-1, failed)
	}
	if n := a.CommandCalls(t)["function|load"]; n != 1 {
		t.Fatalf("%d loads on the healthy shard, want 1: the failed load answers for the calls behind it", n)
	}
}

// userWithoutWait returns a client of srv as a user that may run everything
// but WAIT (an ACL without the +wait the README asks for with
// WaitReplicas; a proxy without WAIT answers "unknown command" alike),
// and a counter of the script commands that succeeded in its pipelines.
func userWithoutWait(t *testing.T, srv *redistest.Server) (*redis.Client, func() (ran int, log []string)) {
	ctx := ctxT(t, 10*time.Second)
	if err := srv.Client(t).Do(ctx, "ACL", "SETUSER", "nowait", "on", ">pw", "~*", "&*", "+@all", "-wait").Err(); err != nil {
		t.Fatal(err)
	}
	user := srv.Client(t, func(o *redis.Options) { o.Username, o.Password = "nowait", "pw" })
	var mu sync.Mutex
	var ran int
	var log []string
	user.AddHook(pipeHook{func(cmds []redis.Cmder) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range cmds {
			switch c.Name() {
			case "fcall", "evalsha", "eval", "wait":
				log = append(log, c.Name()+": "+errText(c.Err()))
				if c.Name() != "wait" && c.Err() == nil {
					ran++
				}
			}
		}
	}})
	return user, func() (int, []string) { mu.Lock(); defer mu.Unlock(); return ran, append([]string(nil), log...) }
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// WAIT refused (an ACL without +wait): the acquire that ran is answered
// with the ReplicationError and its grant forgotten. WAIT's NOPERM must not
// read as FCALL's refusal, or the pipeline would go again by EVALSHA and
// EVAL: the acquire, run twice, would find its own lease and answer
// "full", and the only permit would stay taken for the TTL.
func TestWaitRefusedRunsAcquireOnce(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv := redistest.StartServer(t)
	user, scripts := userWithoutWait(t, srv)
	sem, err := clientFor(t, user, limiter.WaitReplicas(1, 200*time.Millisecond), limiter.TTL(time.Minute)).Semaphore("nowait", 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := sem.TryAcquire(ctx)
	ran, log := scripts()
	t.Logf("TryAcquire: lease %v, err %v; pipelined: %q", l != nil, err, log)
	time.Sleep(300 * time.Millisecond) // a forget, if any, is done
	other, err2 := clientFor(t, srv.Client(t)).Semaphore("nowait", 1)
	if err2 != nil {
		t.Fatal(err2)
	}
	l2, err2 := other.TryAcquire(ctx)
	if l2 != nil {
		_ = l2.Release(ctx)
	}
	if ran > 1 {
		t.Errorf("the acquire script ran %d times for one TryAcquire", ran)
	}
	if l == nil && l2 == nil {
		t.Errorf("TryAcquire gave no lease (%v), yet the semaphore's only permit stays taken: %v", err, err2)
	}
}

// The same for Resume: run twice, the second run (with the old token)
// would answer "not held" for a lease the first took over.
func TestWaitRefusedRunsResumeOnce(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv := redistest.StartServer(t)
	plain, err := clientFor(t, srv.Client(t), limiter.TTL(time.Minute)).Semaphore("nowaitr", 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := plain.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	user, scripts := userWithoutWait(t, srv)
	sem, err := clientFor(t, user, limiter.WaitReplicas(1, 200*time.Millisecond), limiter.TTL(time.Minute)).Semaphore("nowaitr", 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := sem.Resume(ctx, l.Ticket())
	ran, log := scripts()
	t.Logf("Resume: lease %v, err %v; pipelined: %q", r != nil, err, log)
	if ran > 1 {
		t.Errorf("the resume script ran %d times for one Resume", ran)
	}
	if re := new(limiter.ReplicationError); !errors.As(err, &re) {
		t.Errorf("Resume: %v, want the ReplicationError of WAIT's refusal", err)
	}
}

// A server that answers the library's load with an error (here another
// library holds one of its function names) is not sent the load again on
// every call: calls go by EVALSHA, and the load is tried again later.
func TestLibraryTheServerWillNotTakeIsNotLoadedOnEveryCall(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	mu, err := clientFor(t, rdb).Mutex("squatted")
	if err != nil {
		t.Fatal(err)
	}
	tryCycle(t, ctx, mu) // loads the library
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "redsem_*"}).Result()
	if err != nil || len(libs) != 1 {
		t.Fatalf("libraries %v: %v", libs, err)
	}
	var squatted string
	for _, f := range libs[0].Functions {
		if strings.HasSuffix(f.Name, "_resume") { // not called by this test
			squatted = f.Name
		}
	}
	if err := rdb.FunctionDelete(ctx, libs[0].Name).Err(); err != nil {
		t.Fatal(err)
	}
	squatter := "#!lua name=squatter\nredis.register_function('" + squatted + "', function() return 1 end)"
	if err := rdb.FunctionLoad(ctx, squatter).Err(); err != nil {
		t.Fatal(err)
	}
	srv.ResetStats(t)
	for range 20 {
		tryCycle(t, ctx, mu)
	}
	calls := srv.CommandCalls(t)
	t.Logf("calls %v", calls)
	if calls["function|load"] != 1 || calls["evalsha"] < 40 {
		t.Fatalf("function|load %d, evalsha %d: want one load, then EVALSHA", calls["function|load"], calls["evalsha"])
	}
}
