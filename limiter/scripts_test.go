package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
