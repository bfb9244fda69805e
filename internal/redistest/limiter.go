package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter"
)

// Limiter returns a limiter Client of rdb, closed at cleanup: before rdb
// when rdb was made first (cleanups run last-in first-out), and after
// what is registered later (asynq servers, say). A failed Close fails the
// test. The restart quarantine is off unless opts set it: a test server is
// new, and nobody can hold a lease it forgot.
func Limiter(t testing.TB, rdb redis.UniversalClient, opts ...limiter.Option) *limiter.Client {
	t.Helper()
	c, err := limiter.New(rdb, append([]limiter.Option{limiter.RestartQuarantine(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("limiter Client.Close: %v", err)
		}
	})
	return c
}
