package limiter_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// A Redis that may evict the keys is found before the first grant:
// acquisitions are refused, or with AllowEviction an error is logged
// once; a noeviction Redis passes silently.
func TestEvictingRedisIsNoticed(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	evicting := redistest.StartServer(t, "--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru").Client(t)
	var logs strings.Builder
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError}))

	refuse, _ := redistest.Limiter(t, evicting).Mutex("evict")
	if _, err := refuse.TryAcquire(ctx); !errors.Is(err, limiter.ErrEvictingRedis) {
		t.Fatalf("volatile-lru: %v, want ErrEvictingRedis", err)
	}
	warn, _ := redistest.Limiter(t, evicting, limiter.AllowEviction(), limiter.Logger(logger)).Mutex("evict")
	for range 2 {
		l, err := warn.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Release(ctx)
	}
	if n := strings.Count(logs.String(), "may evict"); n != 1 {
		t.Fatalf("%d eviction warnings, want 1:\n%s", n, logs.String())
	}

	logs.Reset()
	safe, _ := redistest.Limiter(t, redistest.StartServer(t, "--maxmemory", "100mb").Client(t),
		limiter.Logger(logger)).Mutex("evict")
	if _, err := safe.TryAcquire(ctx); err != nil {
		t.Fatalf("noeviction: %v", err)
	}
	if logs.Len() != 0 {
		t.Fatalf("logged on a noeviction Redis: %s", logs.String())
	}
}

// An eviction check that could not reach Redis is run again: it must not
// end up as "no eviction" for good.
func TestEvictionCheckRetriedAfterAFailure(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	srv := redistest.StartServer(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	rdb := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	c := redistest.Limiter(t, rdb)
	mu, _ := c.Mutex("recheck")
	srv.Stop(t)
	if _, err := mu.TryAcquire(ctx); err == nil {
		t.Fatal("granted with Redis stopped")
	}
	srv.Restart(t)
	if _, err := mu.TryAcquire(ctx); !errors.Is(err, limiter.ErrEvictingRedis) {
		t.Fatalf("after Redis came back: %v, want ErrEvictingRedis", err)
	}
}

// The eviction check asks a node again only while it has not answered: a
// Redlock node down must not cost the healthy ones an INFO per acquisition.
func TestEvictionCheckAsksOnlyTheSilentNodes(t *testing.T) {
	q := startQuorum(t, 3)
	ctx := ctxT(t, 30*time.Second)
	q.servers[2].Stop(t)
	q.servers[0].ResetStats(t)
	mu, err := newRedlockMutex(t, q.nodes, "evict-down")
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		l, err := mu.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := q.servers[0].CommandCalls(t)["info"]; n != 1 {
		t.Fatalf("a healthy node answered INFO %d times in 5 acquisitions with another node down, want 1", n)
	}
}
