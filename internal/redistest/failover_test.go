package redistest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// KillMaster promotes the replica and a failover client follows it: what
// was replicated survives, what Link held back is lost, and writes work.
func TestFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	f := StartFailover(t)
	t.Logf("StartFailover: %v", time.Since(start))
	first, replica := f.Master(), f.Replica()
	c := f.Client(t)
	if err := c.Set(ctx, "kept", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// At once: StartFailover returns with replication streaming (right
	// after a sync Redis holds the stream back for up to a second).
	if n, err := c.Wait(ctx, 1, 200*time.Millisecond).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 right after StartFailover = %d, %v", n, err)
	}

	f.Link().Blackhole()
	if err := c.Set(ctx, "lost", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Wait(ctx, 1, 200*time.Millisecond).Result(); err != nil || n != 0 {
		t.Fatalf("WAIT 1 with the link blackholed = %d, %v", n, err)
	}

	start = time.Now()
	f.KillMaster(t)
	t.Logf("KillMaster: %v", time.Since(start))
	if f.Master() != replica || f.Replica() != first {
		t.Fatalf("after KillMaster: Master %s, Replica %s; want %s, %s", f.Master().Addr(), f.Replica().Addr(), replica.Addr(), first.Addr())
	}
	// The client may first try the dead master's pooled connections.
	var err error
	for try := 0; try < 50; try++ {
		if err = c.Set(ctx, "after", "1", 0).Err(); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("SET through the failover client after the failover: %v", err)
	}
	if v, err := replica.command(time.Second, "GET", "after"); err != nil || v != "1" {
		t.Fatalf("the write did not reach the promoted replica: %q, %v", v, err)
	}
	if v, err := c.Get(ctx, "kept").Result(); err != nil || v != "1" {
		t.Fatalf("GET kept (replicated) = %q, %v", v, err)
	}
	if err := c.Get(ctx, "lost").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET lost (held back by the link): want redis.Nil, got %v", err)
	}
}
