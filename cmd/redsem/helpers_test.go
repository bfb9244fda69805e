package main

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// testPrefix is not the default, so every test also proves that -prefix
// (limiter.Prefix) is what decides which semaphores redsem sees.
const testPrefix = "cli-test:"

// fixture is a real redis-server, a limiter Client of an application
// holding leases in it (the holder), and one of the CLI (the inspector).
type fixture struct {
	srv     *redistest.Server
	rdb     *redis.Client
	holder  *limiter.Client
	cli     *limiter.Client
	timeout context.Context
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	f := &fixture{srv: srv, rdb: rdb,
		holder: redistest.Limiter(t, srv.Client(t), limiter.Prefix(testPrefix)),
		cli:    redistest.Limiter(t, rdb, limiter.Prefix(testPrefix)),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	f.timeout = ctx
	return f
}

func (f *fixture) ctx() context.Context { return f.timeout }

// sem is a semaphore of the holder, the application's view.
func (f *fixture) sem(t *testing.T, name string, limit int64, opts ...limiter.NameOption) *limiter.Semaphore {
	t.Helper()
	s, err := f.holder.Semaphore(name, limit, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// effectiveLimit is the limit s's grants obey, as the holder's Inspector
// reads it: the fleet-wide limit (fleet true) when one is set, else s's
// own.
func (f *fixture) effectiveLimit(s *limiter.Semaphore) (limit int64, fleet bool, err error) {
	n, err := inspect.New(f.holder).Limit(f.ctx(), s.Name())
	if err != nil || n == 0 {
		return s.Limit(), false, err
	}
	return n, true, nil
}

// hold acquires a lease with that id and weight, or fails the test.
func (f *fixture) hold(t *testing.T, s *limiter.Semaphore, id string, weight int64) *limiter.Lease {
	t.Helper()
	l, err := s.TryAcquire(f.ctx(), limiter.ID(id), limiter.Weight(weight))
	if err != nil {
		t.Fatalf("acquire %s/%s: %v", s.Name(), id, err)
	}
	f.recorded(t, s.Name(), func(u inspect.InUse) bool { return len(u.Limits) > 0 })
	return l
}

// recorded waits until what the holder's Client records of name in use
// (within ~1s of its first use) satisfies has, so that the output does
// not depend on the moment a command reads it: a name used as a
// semaphore and then as a rate limit has its limit recorded first.
func (f *fixture) recorded(t *testing.T, name string, has func(inspect.InUse) bool) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if u, err := inspect.New(f.holder).InUse(f.ctx(), name); err == nil && has(u) {
			return
		}
	}
	t.Fatalf("what %s has in use was not recorded within 3s", name)
}

// run calls a command function as main does, and returns its output.
func (f *fixture) run(t *testing.T, fn func(w *bytes.Buffer) error) string {
	t.Helper()
	var buf bytes.Buffer
	if err := fn(&buf); err != nil {
		t.Fatalf("command failed: %v\noutput:\n%s", err, buf.String())
	}
	return buf.String()
}

// queue starts a waiting Acquire on s (of the holder, made with
// AcquireTimeout(0)) for each weight, each once the one before it is in
// the queue, so they queue in this order; it returns the queue as the
// limiter reads it. They wait until the test ends.
func (f *fixture) queue(t *testing.T, s *limiter.Semaphore, weights ...int64) []inspect.Waiter {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() }) // before the Clients close
	in := inspect.New(f.holder)
	before, err := in.Waiters(f.ctx(), s.Name())
	if err != nil {
		t.Fatal(err)
	}
	var ws []inspect.Waiter
	for i, w := range weights {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l, err := s.Acquire(ctx, limiter.Weight(w)); err == nil {
				_ = l.Release(context.Background())
			}
		}()
		redistest.Eventually(t, 5*time.Second, "a waiter in the queue", func() bool {
			ws, err = in.Waiters(f.ctx(), s.Name())
			return err == nil && len(ws) == len(before)+i+1
		})
	}
	return ws
}
