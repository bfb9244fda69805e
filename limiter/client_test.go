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
	"go.uber.org/goleak"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// pubsubConns counts the pub/sub connections on every node of rdb.
func pubsubConns(t testing.TB, rdb redis.UniversalClient) (total, most int) {
	t.Helper()
	count := func(ctx context.Context, c *redis.Client) error {
		list, err := c.ClientList(ctx).Result()
		if err != nil {
			return err
		}
		n := 0
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " sub=") && !strings.Contains(line, " sub=0 ") ||
				strings.Contains(line, " ssub=") && !strings.Contains(line, " ssub=0") {
				n++
			}
		}
		total += n
		most = max(most, n)
		return nil
	}
	ctx := ctxT(t, 5*time.Second)
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		err = c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return count(ctx, n)
		})
	case *redis.Client:
		err = count(ctx, c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return total, most
}

// Waiting on 500 names at once from one Client costs one pub/sub
// connection (the Client's wake channel), not one per name.
func TestOneWakeConnectionPerClient(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 60*time.Second)
		holder := clientFor(t, b.client(t))
		rdb := b.client(t)
		waiter := clientFor(t, rdb)
		const names = 500
		var wg sync.WaitGroup
		waitCtx, stop := context.WithCancel(ctx)
		defer stop()
		var queues []string
		for i := range names {
			name := uniqueName(b, fmt.Sprintf("conn%d-", i))
			hs, _ := holder.Mutex(name)
			l, err := hs.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_ = l
			queues = append(queues, queueKey(name))
			ws, _ := waiter.Mutex(name, limiter.AcquireTimeout(0))
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := ws.Acquire(waitCtx); !errors.Is(err, context.Canceled) {
					t.Errorf("wait on %s: %v", name, err)
				}
			}()
		}
		redistest.Eventually(t, 20*time.Second, "every waiter queued", func() bool {
			for _, q := range queues {
				if n, err := rdb.ZCard(ctx, q).Result(); err != nil || n != 1 {
					return false
				}
			}
			return true
		})
		total, most := pubsubConns(t, rdb)
		if total > 3 || most > 1 {
			t.Fatalf("%d pub/sub connections (%d on one node) for 500 waited-on names, want at most one per node", total, most)
		}
		stop()
		wg.Wait()
	})
}

// Close ends a wait in progress with ErrClosed, gives back every lease the
// Client holds, and leaves no goroutine and no log line behind.
func TestCloseEndsEverything(t *testing.T) {
	var logged strings.Builder
	var logMu sync.Mutex
	redis.SetLogger(logFunc(func(s string) { logMu.Lock(); logged.WriteString(s); logMu.Unlock() }))
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 20*time.Second)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	observer := srv.Client(t)
	c, err := limiter.New(rdb, limiter.RestartQuarantine(0))
	if err != nil {
		t.Fatal(err)
	}
	sem, _ := c.Semaphore("close", 2)
	other, _ := c.Semaphore("close-other", 1)
	a, err := sem.Acquire(ctx, limiter.Weight(2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := sem.Acquire(ctx)
		waited <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; !errors.Is(err, limiter.ErrClosed) {
		t.Fatalf("a wait ended by Close: %v, want ErrClosed", err)
	}
	if !errors.Is(a.Err(), limiter.ErrNotHeld) {
		t.Fatalf("a held lease after Close: %v", a.Err())
	}
	if _, err := sem.TryAcquire(ctx); !errors.Is(err, limiter.ErrClosed) {
		t.Fatalf("TryAcquire after Close: %v", err)
	}
	if _, err := inspect.New(c).Holders(ctx, "close"); !errors.Is(err, limiter.ErrClosed) {
		t.Fatalf("Inspector.Holders after Close: %v", err)
	}
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	oc := clientFor(t, observer)
	for _, n := range []string{"close", "close-other"} {
		if hs, err := inspect.New(oc).Holders(ctx, n); err != nil || len(hs) != 0 {
			t.Fatalf("%s after Close: holders %v, %v", n, hs, err)
		}
	}
	if err := oc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_ = observer.Close()
	logMu.Lock()
	defer logMu.Unlock()
	if logged.Len() > 0 {
		t.Fatalf("go-redis logged: %s", logged.String())
	}
}

// A grant whose reply lands after Close collected the leases it releases
// is given back at once and reported as ErrClosed, not handed out to be
// left to its TTL.
func TestGrantAfterCloseIsGivenBack(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx := ctxT(t, 20*time.Second)
	c, err := limiter.New(rdb, limiter.TTL(30*time.Second), limiter.RestartQuarantine(0))
	if err != nil {
		t.Fatal(err)
	}
	sem, _ := c.Mutex("after-close")
	if l, err := sem.TryAcquire(ctx); err != nil || l.Release(ctx) != nil { // scripts loaded, connection up
		t.Fatal(err)
	}
	srv.Pause(t)
	type result struct {
		l   *limiter.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := sem.TryAcquire(ctx)
		got <- result{l, err}
	}()
	time.Sleep(100 * time.Millisecond) // the acquire is on the wire
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Resume(t)
	r := <-got
	if !errors.Is(r.err, limiter.ErrClosed) {
		t.Fatalf("acquire granted after Close: lease %v, err %v; want ErrClosed", r.l, r.err)
	}
	other, _ := newSemaphore(t, rdb, "after-close", 1)
	if n, err := available(ctx, other); err != nil || n != 1 {
		t.Fatalf("after the late grant: %d free (%v), want 1", n, err)
	}
}

// queueKey is the wait queue's key of a semaphore under the default prefix.
func queueKey(name string) string { return keyOf(name, "queue") }

// keyOf is a semaphore's key of kind "leases", "state" or "queue" under
// the default prefix.
func keyOf(name, kind string) string {
	return limiter.DefaultPrefix + "{" + strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(name) + "}:" + kind
}

type logFunc func(string)

func (f logFunc) Printf(_ context.Context, format string, v ...any) { f(fmt.Sprintf(format, v...)) }
