package limiter_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// A server that lost its scripts and functions (SCRIPT FLUSH, FUNCTION
// FLUSH, a restart, a failover) gets them again: FCALL loads the library,
// EVALSHA falls back to EVAL.
func TestScriptsReloaded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb := b.client(t)
		mu, _ := newMutex(t, rdb, uniqueName(b, "flush"))
		for range 2 {
			flush(t, rdb)
			l, err := mu.TryAcquire(ctx)
			if err != nil {
				t.Fatal("TryAcquire after a flush:", err)
			}
			flush(t, rdb)
			if err := l.Release(ctx); err != nil {
				t.Fatal("Release after a flush:", err)
			}
		}
	})
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
	if err := rdb.FunctionLoad(ctx, limiter.OtherVersionLibrary()).Err(); err != nil {
		t.Fatal(err)
	}
	mu, _ := newMutex(t, rdb, "two-versions")
	srv.ResetStats(t)
	const cycles = 5
	for range cycles {
		l, err := mu.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
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

// Redis out of memory (maxmemory, noeviction) refuses a script that may
// write before it runs: no new grant then, but holders must keep their
// leases (refresh), take over parked ones (resume) and give them back
// (release); with WaitReplicas too, whose scripts go in a pipeline with
// WAIT.
func TestHoldersAtMaxmemory(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.StartServer(t)
		rdb := srv.Client(t)
		holdersAtMaxmemory(t, rdb, clientFor(t, rdb))
	})
	t.Run("WaitReplicas", func(t *testing.T) {
		f := redistest.StartFailover(t)
		holdersAtMaxmemory(t, f.Master().Client(t), clientFor(t, f.Client(t), limiter.WaitReplicas(1, time.Second)))
	})
}

// holdersAtMaxmemory runs the checks on a semaphore of c whose master
// master is.
func holdersAtMaxmemory(t *testing.T, master *redis.Client, c *limiter.Client) {
	ctx := ctxT(t, 10*time.Second)
	sem, err := c.Semaphore("oom", 3, limiter.TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	l, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	parked, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ticket := parked.Ticket()
	if err := master.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer master.ConfigSet(context.Background(), "maxmemory", "0")
	if _, err := sem.TryAcquire(ctx); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("an acquire out of memory: %v, want Redis's OOM refusal", err)
	}
	if err := l.Refresh(ctx); err != nil {
		t.Fatal("Refresh out of memory:", err)
	}
	resumed, err := sem.Resume(ctx, ticket)
	if err != nil {
		t.Fatal("Resume out of memory:", err)
	}
	for _, l := range []*limiter.Lease{l, resumed} {
		if err := l.Release(ctx); err != nil {
			t.Fatal("Release out of memory:", err)
		}
	}
	if n := master.ZCard(ctx, keyOf("oom", "leases")).Val(); n != 1 {
		t.Fatalf("%d members in the leases set after the releases, want only the placeholder", n)
	}
}

// Calls that find the library missing at once (here after a flush) load it
// once between them, not once each.
func TestLibraryLoadedOnceForConcurrentCalls(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 10*time.Second)
	rdb := srv.Client(t, func(o *redis.Options) { o.PoolSize = 32 })
	c := redistest.Limiter(t, rdb)
	const n = 16
	var mus []*limiter.Semaphore
	for i := range n {
		mu, err := c.Mutex(fmt.Sprint("load-once-", i))
		if err != nil {
			t.Fatal(err)
		}
		mus = append(mus, mu)
	}
	if _, err := mus[0].TryAcquire(ctx); err != nil { // the library is loaded, then flushed
		t.Fatal(err)
	}
	flush(t, rdb)
	srv.ResetStats(t)
	start := make(chan struct{})
	errs := make(chan error, n)
	for _, mu := range mus[1:] {
		go func() {
			<-start
			_, err := mu.TryAcquire(ctx)
			errs <- err
		}()
	}
	close(start)
	for range n - 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	calls := srv.CommandCalls(t)
	if calls["function|load"] != 1 {
		t.Fatalf("%d concurrent acquires after a flush: %v; want one FUNCTION LOAD", n-1, calls)
	}
}
