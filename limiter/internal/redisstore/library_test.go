package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter/internal/redisstore"
	"github.com/redsem/redsem/limiter/internal/store"
)

// How a Store gets its scripts onto a server (send.go): the library
// loaded by FUNCTION LOAD and called by FCALL, EVALSHA and EVAL behind.

// A server that lost its scripts and functions (SCRIPT FLUSH, FUNCTION
// FLUSH, a restart, a failover) gets them again: FCALL loads the library,
// EVALSHA falls back to EVAL.
func TestScriptsReloaded(t *testing.T) {
	run := func(t *testing.T, rdb redis.UniversalClient) {
		ctx := ctxT(t, 10*time.Second)
		s := newStore(rdb)
		k := keyspace("flush", 1)
		for range 2 {
			flush(t, rdb)
			rep := mustAcquire(t, ctx, s, k, request(k, "x", ""), true)
			flush(t, rdb)
			mustRelease(t, ctx, s, k, "x", rep.Token)
		}
	}
	t.Run("single", func(t *testing.T) { run(t, redistest.StartServer(t).Client(t)) })
	t.Run("cluster", func(t *testing.T) { run(t, redistest.StartCluster(t, 3).Client(t)) })
}

func flush(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	flushFunctions := func(ctx context.Context, c *redis.Client) error { return c.FunctionFlush(ctx).Err() }
	var err error
	if c, ok := rdb.(*redis.ClusterClient); ok {
		err = c.ForEachMaster(ctx, flushFunctions)
	} else {
		err = rdb.FunctionFlush(ctx).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Two versions share a server whose acquire is the same and whose release
// differs: each loads its library once, and neither's names stand in the
// other's way (function names are global on a server).
func TestLibrariesOfTwoVersions(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 10*time.Second)
	rdb := srv.Client(t)
	if err := rdb.FunctionLoad(ctx, redisstore.OtherVersionLibrary()).Err(); err != nil {
		t.Fatal(err)
	}
	s, k := newStore(rdb), keyspace("two-versions", 1)
	srv.ResetStats(t)
	const cycles = 5
	for range cycles {
		cycle(t, ctx, s, k, "x")
	}
	calls := srv.CommandCalls(t)
	if calls["function|load"] != 1 || calls["fcall"] != 2*cycles+1 || calls["evalsha"]+calls["eval"] != 0 {
		t.Fatalf("%d cycles beside another version's library: %v; want one FUNCTION LOAD and every script by FCALL", cycles, calls)
	}
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) != 2 {
		t.Fatalf("%d libraries on the server, want both versions'", len(libs))
	}
}

// Calls that find the library missing at once (here after a flush) load it
// once between them, not once each.
func TestLibraryLoadedOnceForConcurrentCalls(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 10*time.Second)
	rdb := srv.Client(t, func(o *redis.Options) { o.PoolSize = 32 })
	s := newStore(rdb)
	cycle(t, ctx, s, keyspace("load-once", 1), "x") // the library is loaded, then flushed
	flush(t, rdb)
	srv.ResetStats(t)
	const n = 16
	start := make(chan struct{})
	errs := make(chan error, n)
	for i := range n {
		go func() {
			<-start
			k := keyspace(fmt.Sprint("load-once-", i), 1)
			_, err := s.Acquire(ctx, k, request(k, "x", ""))
			errs <- err
		}()
	}
	close(start)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if calls := srv.CommandCalls(t); calls["function|load"] != 1 {
		t.Fatalf("%d concurrent acquires after a flush: %v; want one FUNCTION LOAD", n, calls)
	}
}

// A server that answers the library's load with an error (here another
// library holds one of its function names) is not sent the load again on
// every call: calls go by EVALSHA, and the load is tried again later.
func TestLibraryTheServerWillNotTakeIsNotLoadedOnEveryCall(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	s, k := newStore(rdb), keyspace("squatted", 1)
	cycle(t, ctx, s, k, "x") // loads the library
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
		cycle(t, ctx, s, k, "x")
	}
	calls := srv.CommandCalls(t)
	if calls["function|load"] != 1 || calls["evalsha"] < 40 {
		t.Fatalf("function|load %d, evalsha %d: want one load, then EVALSHA: %v", calls["function|load"], calls["evalsha"], calls)
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
	s := newStore(ring)
	var ks []store.Keyspace // names on the healthy shard
	for i := 0; len(ks) < 11; i++ {
		k := keyspace(fmt.Sprint("ring-", i), 1)
		shard, err := ring.GetShardClientForKey(k.Keys[2])
		if err != nil {
			t.Fatal(err)
		}
		if shard.Options().Addr == a.Addr() {
			ks = append(ks, k)
		}
	}
	cycle(t, ctx, s, ks[0], "x") // loads the library on both shards
	if err := a.Client(t).FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	px.Blackhole()
	defer px.Heal()
	a.ResetStats(t)
	var wg sync.WaitGroup
	errs := make(chan error, len(ks))
	start := make(chan struct{})
	for _, k := range ks[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			cctx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
			defer cancel()
			began := time.Now()
			if _, err := s.Acquire(cctx, k, request(k, "x", "")); err != nil {
				errs <- fmt.Errorf("after %v: %w", time.Since(began).Round(time.Millisecond), err)
			}
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
		t.Fatalf("%d of %d acquires on the healthy shard failed: %v", len(failed), len(ks)-1, failed)
	}
	if n := a.CommandCalls(t)["function|load"]; n != 1 {
		t.Fatalf("%d loads on the healthy shard, want 1: the failed load answers for the calls behind it", n)
	}
}

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
	s := newStore(cc)
	var batches []store.RefreshBatch
	for i := range 12 {
		k := keyspace(fmt.Sprint("pipe-", i), 2)
		rep := mustAcquire(t, ctx, s, k, request(k, "x", ""), true)
		batches = append(batches, store.RefreshBatch{Keys: k, Leases: []store.RefreshItem{{ID: "x", Token: rep.Token, TTL: time.Minute}}})
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
	for i, res := range s.Refresh(ctx, batches) {
		if res.Err != nil || len(res.Held) != 1 || !res.Held[0] {
			t.Fatalf("batch %d: held %v, %v", i, res.Held, res.Err)
		}
	}
	calls := cl.CommandCalls(t)
	mu.Lock()
	defer mu.Unlock()
	if calls["function|load"] != 3 {
		t.Fatalf("function|load %d, want one load on each of 3 masters: %v", calls["function|load"], calls)
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
