package asynqmw_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter/inspect"
)

// parkRules: one task per customer at a time, three in all, narrowest
// first.
var parkRules = []asynqmw.Rule{
	{Name: "park-customer", Key: customerOf, Limit: 1},
	{Name: "park-all", Limit: 3},
}

// parkWorker is a child process of TestParkedKeyFreesTheHandler: two
// handlers, Park on, each task 400ms, its start noted and its
// concurrency observed in Redis.
func parkWorker() int {
	return childWorkerWith(2, parkRules, func(rdb *redis.Client) []asynqmw.Option {
		return []asynqmw.Option{asynqmw.Park(rdb)}
	}, func(rdb *redis.Client) asynq.HandlerFunc {
		return func(ctx context.Context, t *asynq.Task) error {
			bg := context.Background()
			cust, _ := customerOf(ctx, t)
			rdb.RPush(bg, "starts:"+cust, time.Now().UnixMilli())
			keys := []string{"running:all", "running:" + cust}
			for _, k := range keys {
				observe.Run(bg, rdb, []string{k, k + ":peak"}, 1)
			}
			time.Sleep(400 * time.Millisecond)
			for _, k := range keys {
				observe.Run(bg, rdb, []string{k, k + ":peak"}, -1)
			}
			rdb.Incr(bg, "done")
			return nil
		}
	})
}

// Two worker processes of two handlers each, six tasks of customer a
// queued before two of b: the tasks of a that find a's permit taken
// while the fleet has room leave their handlers (Park), so b's first
// task starts at once rather than after three of a's; each release of
// a's permit puts the next one back, so all are done long before the
// 30s fallback, and the caps hold throughout.
func TestParkedKeyFreesTheHandler(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	ac := asynq.NewClientFromRedisClient(rdb)
	for i := range 8 {
		cust := "a"
		if i >= 6 {
			cust = "b"
		}
		enqueue(t, ac, asynq.NewTask("t", []byte(`{"Customer":"`+cust+`"}`)))
	}
	start := time.Now()
	startChild(t, "park", srv.Addr())
	startChild(t, "park", srv.Addr())
	redistest.Eventually(t, 15*time.Second, "all 8 tasks done", func() bool {
		n, _ := rdb.Get(ctx, "done").Int()
		return n == 8
	})
	took := time.Since(start)
	first := func(cust string) time.Time {
		v, err := rdb.LIndex(ctx, "starts:"+cust, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		ms, _ := strconv.ParseInt(v, 10, 64)
		return time.UnixMilli(ms)
	}
	if gap := first("b").Sub(first("a")); gap > 600*time.Millisecond {
		t.Errorf("b's first task started %v after a's: handlers sat on a's full key", gap)
	}
	if took > 10*time.Second {
		t.Errorf("8 tasks took %v: parked tasks were not put back by the releases", took)
	}
	for key, limit := range map[string]int{"running:all:peak": 3, "running:a:peak": 1, "running:b:peak": 1} {
		if peak, _ := rdb.Get(ctx, key).Int(); peak > limit {
			t.Errorf("%s = %d, above its limit %d", key, peak, limit)
		}
	}
}

// An entry left in a park list for a task that is no longer parked (it
// came back by itself and completed) is dropped by the release that
// finds it: the completed task does not run again.
func TestStaleParkEntryDoesNotRerun(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	mw, err := asynqmw.New(redistest.Limiter(t, rdb), parkRules, asynqmw.Park(rdb))
	if err != nil {
		t.Fatal(err)
	}
	runs := make(chan string, 10)
	startServer(t, srv.Addr(), 2, nil, mw(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		runs <- id
		return nil
	})))
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	payload := []byte(`{"Customer":"A"}`)
	first := enqueue(t, client, asynq.NewTask("t", payload))
	if id := <-runs; id != first.ID {
		t.Fatalf("ran %s, want %s", id, first.ID)
	}
	redistest.Eventually(t, 5*time.Second, "the first task completed", func() bool {
		info, err := asynq.NewInspectorFromRedisClient(rdb).GetTaskInfo(first.Queue, first.ID)
		return err == nil && info.State == asynq.TaskStateCompleted
	})
	stale := first.Queue + "\x00" + first.ID + "\x00" + strconv.FormatInt(time.Now().UnixMilli(), 10)
	rdb.RPush(context.Background(), "redsem:park:{park-customer:A}", stale)
	second := enqueue(t, client, asynq.NewTask("t", payload)) // its release finds the entry
	if id := <-runs; id != second.ID {
		t.Fatalf("ran %s, want %s", id, second.ID)
	}
	select {
	case id := <-runs:
		t.Fatalf("task %s ran again (the first was %s)", id, first.ID)
	case <-time.After(time.Second):
	}
}

// One process of four handlers, the fleet-wide permit held elsewhere and
// four tasks of customer a queued before one of b: a's first task takes
// a's permit and waits for the fleet's, two more wait for a's permit
// (its limit and one), and the fourth parks, so b's task gets a handler
// and joins the fleet's queue beside a's rather than wait until a's
// waits time out.
func TestFullFleetParksPastTheKeysWaiters(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	lc := redistest.Limiter(t, rdb)
	rules := []asynqmw.Rule{
		{Name: "park-customer", Key: customerOf, Limit: 1},
		{Name: "park-fleet", Limit: 1},
	}
	mw, err := asynqmw.New(lc, rules, asynqmw.Park(rdb))
	if err != nil {
		t.Fatal(err)
	}
	fleet := holdElsewhere(t, rdb, "park-fleet")
	var done atomic.Int32
	startServer(t, srv.Addr(), 4, nil, mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		done.Add(1)
		return nil
	})))
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	for _, cust := range []string{"a", "a", "a", "a", "b"} {
		enqueue(t, client, asynq.NewTask("t", []byte(`{"Customer":"`+cust+`"}`)))
	}
	ctx := context.Background()
	redistest.Eventually(t, 2*time.Second, "b's task holds b's permit while the fleet's is taken", func() bool {
		hs, err := inspect.New(lc).Holders(ctx, "park-customer:b")
		return err == nil && len(hs) == 1
	})
	if err := fleet.Release(ctx); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, "all 5 tasks done", func() bool { return done.Load() == 5 })
}

// acquireHook counts acquire script calls by the name in their first key.
type acquireHook struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *acquireHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *acquireHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 3 && strings.HasSuffix(fmt.Sprint(a[1]), "_acquire") {
			k := fmt.Sprint(a[3])
			h.mu.Lock()
			h.n[k[strings.IndexByte(k, '{')+1:strings.IndexByte(k, '}')]]++
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *acquireHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *acquireHook) count(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[name]
}

// While a handler of this process waits in a gate's queue, a try there
// would be refused (the queue goes first): a task whose key is full does
// not ask the later gate whether it has room, nor does a task whose key
// another handler here waits for try the key first. Here the fleet's
// permit is held elsewhere, b's task and a's first wait for it, and a's
// second and third wait for a's permit: the fleet saw the two waits'
// acquires alone, and a's key one try (the second task's) and the two
// waits'. Then each release grants the next waiter directly.
func TestLocalWaiterAnswersTries(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	lrdb := srv.Client(t)
	hook := &acquireHook{n: map[string]int{}}
	lrdb.AddHook(hook)
	lc := redistest.Limiter(t, lrdb)
	rules := []asynqmw.Rule{
		{Name: "park-customer", Key: customerOf, Limit: 1},
		{Name: "park-fleet", Limit: 1},
	}
	mw, err := asynqmw.New(lc, rules, asynqmw.Park(rdb))
	if err != nil {
		t.Fatal(err)
	}
	fleet := holdElsewhere(t, rdb, "park-fleet")
	var done atomic.Int32
	startServer(t, srv.Addr(), 4, nil, mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		done.Add(1)
		return nil
	})))
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	ctx := context.Background()
	queued := func(name string) int64 { return rdb.ZCard(ctx, "redsem:{"+name+"}:queue").Val() }
	for _, s := range []struct {
		cust, name string
		n          int64
	}{{"b", "park-fleet", 1}, {"a", "park-fleet", 2}, {"a", "park-customer:a", 1}, {"a", "park-customer:a", 2}} {
		enqueue(t, client, asynq.NewTask("t", []byte(`{"Customer":"`+s.cust+`"}`)))
		redistest.Eventually(t, 5*time.Second, fmt.Sprintf("%d waiting for %s", s.n, s.name), func() bool { return queued(s.name) == s.n })
	}
	if got := hook.count("park-fleet"); got != 2 {
		t.Errorf("%d acquires of the fleet's permit, want 2 (the two waits, no tries)", got)
	}
	if got := hook.count("park-customer:a"); got != 4 {
		t.Errorf("%d acquires of a's permit, want 4 (the first task's, the second's try and wait, the third's wait)", got)
	}
	if err := fleet.Release(ctx); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, "all 4 tasks done", func() bool { return done.Load() == 4 })
	// Each release granted the next waiter its permit directly (a run's
	// lease id is the limiter's own: IDPrefix): no waiter asked again.
	// a's second and third tasks found the fleet's permit free.
	if fleet, a := hook.count("park-fleet"), hook.count("park-customer:a"); fleet != 4 || a != 4 {
		t.Errorf("in all %d acquires of the fleet's permit and %d of a's, want 4 and 4: a woken waiter asked again", fleet, a)
	}
}
