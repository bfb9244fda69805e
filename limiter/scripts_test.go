package limiter_test

import (
	"testing"
	"time"
)

// A server that lost its scripts (SCRIPT FLUSH, a restart, a failover)
// gets them again: EVALSHA falls back to EVAL.
func TestScriptsReloaded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb := b.client(t)
		mu, _ := newMutex(t, rdb, uniqueName(b, "flush"))
		for range 2 {
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			l, err := mu.TryAcquire(ctx)
			if err != nil {
				t.Fatal("TryAcquire after SCRIPT FLUSH:", err)
			}
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal("Release after SCRIPT FLUSH:", err)
			}
		}
	})
}
