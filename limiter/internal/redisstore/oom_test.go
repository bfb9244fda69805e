package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter/internal/redisstore"
	"github.com/redsem/redsem/limiter/internal/store"
)

// Redis out of memory (maxmemory, noeviction) refuses a script that may
// write before it runs: no new grant then, but holders must keep their
// leases (refresh), take over parked ones (resume) and give them back
// (release); with replicas too, whose scripts go in a pipeline with
// WAIT.
func TestHoldersAtMaxmemory(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		rdb := redistest.StartServer(t).Client(t)
		holdersAtMaxmemory(t, rdb, newStore(rdb), store.ReplicaWait{})
	})
	t.Run("WaitReplicas", func(t *testing.T) {
		f := redistest.StartFailover(t)
		holdersAtMaxmemory(t, f.Master().Client(t), newStore(f.Client(t)), store.ReplicaWait{N: 1, Timeout: time.Second})
	})
}

// holdersAtMaxmemory runs the checks on s, whose master master is.
func holdersAtMaxmemory(t *testing.T, master *redis.Client, s *redisstore.Store, w store.ReplicaWait) {
	ctx := ctxT(t, 10*time.Second)
	k := keyspace("oom", 3)
	with := func(r store.AcquireRequest) store.AcquireRequest { r.Replicas = w; return r }
	held := mustAcquire(t, ctx, s, k, with(request(k, "held", "")), true)
	parked := mustAcquire(t, ctx, s, k, with(request(k, "parked", "")), true)
	if err := master.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer master.ConfigSet(context.Background(), "maxmemory", "0")
	if _, err := s.Acquire(ctx, k, with(request(k, "new", ""))); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("an acquire out of memory: %v, want Redis's OOM refusal", err)
	}
	res := s.Refresh(ctx, []store.RefreshBatch{{Keys: k, Replicas: w,
		Leases: []store.RefreshItem{{ID: "held", Token: held.Token, TTL: time.Minute}}}})
	if res[0].Err != nil || !res[0].Held[0] {
		t.Fatalf("refresh out of memory: held %v, %v", res[0].Held, res[0].Err)
	}
	resumed, err := s.Resume(ctx, k, store.ResumeRequest{ID: "parked", Token: parked.Token, Owner: owner, TTL: time.Minute, Replicas: w})
	if err != nil || !resumed.Granted {
		t.Fatalf("resume out of memory: %+v, %v", resumed, err)
	}
	mustRelease(t, ctx, s, k, "held", held.Token)
	mustRelease(t, ctx, s, k, "parked", resumed.Token)
	if n := master.ZCard(ctx, k.Keys[0]).Val(); n != 1 {
		t.Fatalf("%d members in the leases set after the releases, want only the placeholder", n)
	}
}
