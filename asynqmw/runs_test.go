package asynqmw_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// A wait that runs out returns a *BusyError that matches limiter.ErrBusy
// and names the full semaphore.
func TestBusyErrorIsErrBusy(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	mw, err := asynqmw.New(redistest.Limiter(t, rdb), []asynqmw.Rule{{Name: "full", Limit: 1, AcquireTimeout: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	holdElsewhere(t, rdb, "full")
	err = mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		t.Error("the handler ran without a permit")
		return nil
	})).ProcessTask(ctx, asynq.NewTask("x", nil))
	var busy *asynqmw.BusyError
	if !errors.As(err, &busy) || busy.Semaphore != "full" {
		t.Fatalf("got %v, want a *BusyError naming the semaphore", err)
	}
	if !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("errors.Is(%v, limiter.ErrBusy) is false", err)
	}
}

// Task ids are unique per queue only: two tasks with one id in two queues
// are two runs, each with its own permit (limit 2), at the same time.
func TestLeaseIDIncludesQueue(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	mw, err := asynqmw.New(redistest.Limiter(t, rdb), []asynqmw.Rule{{Name: "q", Limit: 2, AcquireTimeout: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	var both sync.WaitGroup
	both.Add(2)
	together := make(chan struct{})
	go func() { both.Wait(); close(together) }()
	in := inspect.New(redistest.Limiter(t, rdb))
	ids := make(chan []string, 1)
	startServer(t, srv.Addr(), 4, func(c *asynq.Config) { c.Queues = map[string]int{"a": 1, "b": 1} },
		mw(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			both.Done()
			select {
			case <-together:
			case <-time.After(3 * time.Second):
				return errors.New("the same task id in the other queue did not run alongside")
			}
			if hs, err := in.Holders(ctx, "q"); err == nil {
				var s []string
				for _, h := range hs {
					s = append(s, h.ID)
				}
				select {
				case ids <- s:
				default:
				}
			}
			return nil
		})))
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	enqueue(t, client, asynq.NewTask("t", nil), asynq.Queue("a"), asynq.TaskID("same"), asynq.MaxRetry(0))
	enqueue(t, client, asynq.NewTask("t", nil), asynq.Queue("b"), asynq.TaskID("same"), asynq.MaxRetry(0))
	select {
	case <-together:
	case <-time.After(10 * time.Second):
		t.Fatal("the two tasks never ran at the same time: they shared a lease id")
	}
	got := <-ids
	slices.Sort(got)
	if len(got) != 2 || !strings.HasPrefix(got[0], "a:same:0:") || !strings.HasPrefix(got[1], "b:same:0:") {
		t.Fatalf("lease ids %q, want a:same:0:... and b:same:0:...", got)
	}
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer insp.Close()
	redistest.Eventually(t, 10*time.Second, "both complete", func() bool {
		a, _ := insp.GetTaskInfo("a", "same")
		b, _ := insp.GetTaskInfo("b", "same")
		return a != nil && b != nil && a.State == asynq.TaskStateCompleted && b.State == asynq.TaskStateCompleted
	})
}

// A handler that ignores its 1s deadline and asynq's retry of the task are
// two runs: each holds its own lease, never one shared, and together they
// never exceed the limit. With limit 2 the retry runs beside the stuck run;
// with limit 1 it waits for the stuck run to give its permit back.
func TestStuckRunAndItsRetry(t *testing.T) {
	for _, limit := range []int64{1, 2} {
		t.Run(fmt.Sprint("limit-", limit), func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			rdb := srv.Client(t)
			ctx := context.Background()
			mw, err := asynqmw.New(redistest.Limiter(t, rdb), []asynqmw.Rule{{Name: "stuck", Limit: limit, AcquireTimeout: 200 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			lc := redistest.Limiter(t, rdb)
			sem, _ := lc.Semaphore("stuck", limit)
			var c redistest.Gauge
			var runs atomic.Int64
			stuckDone := make(chan struct{})
			retryStarted := make(chan bool, 1) // whether the stuck run was still running
			holders := make(chan []inspect.Holder, 1)
			startServer(t, srv.Addr(), 4, func(cfg *asynq.Config) {
				cfg.RetryDelayFunc = asynqmw.RetryDelay(func(int, error, *asynq.Task) time.Duration { return 100 * time.Millisecond })
			}, mw(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
				c.Enter()
				defer c.Leave()
				if runs.Add(1) == 1 {
					time.Sleep(3 * time.Second) // ignores its deadline
					close(stuckDone)
					return nil
				}
				select {
				case <-stuckDone:
					retryStarted <- false
				default:
					hs, _ := inspect.New(lc).Holders(ctx, sem.Name())
					holders <- hs
					retryStarted <- true
				}
				return nil
			})))
			client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
			defer client.Close()
			info := enqueue(t, client, asynq.NewTask("stuck", nil), asynq.Timeout(time.Second), asynq.MaxRetry(3))
			var during bool
			select {
			case during = <-retryStarted:
			case <-time.After(20 * time.Second):
				t.Fatal("asynq's retry never ran")
			}
			if p := c.Peak(); p > limit {
				t.Fatalf("%d handlers at once on a limit of %d", p, limit)
			}
			switch {
			case limit == 1 && during:
				t.Fatal("the retry ran while the stuck run held the only permit")
			case limit == 2 && !during:
				t.Fatal("the retry waited for the stuck run although a permit was free: they shared a lease id")
			case limit == 2:
				hs := <-holders
				if len(hs) != 2 || hs[0].ID == hs[1].ID {
					t.Fatalf("holders while both runs ran: %+v, want two leases", hs)
				}
				prefix := map[string]bool{}
				for _, h := range hs {
					prefix[h.ID[:strings.LastIndexByte(h.ID, ':')]] = true
				}
				if !prefix["default:"+info.ID+":0"] || !prefix["default:"+info.ID+":1"] {
					t.Fatalf("lease ids %+v, want default:%s:0:... and default:%s:1:...", hs, info.ID, info.ID)
				}
			}
			<-stuckDone
			redistest.Eventually(t, 5*time.Second, "every permit back", func() bool {
				n, _ := redistest.Available(ctx, inspect.New(lc), sem.Name(), sem.Limit())
				return n == limit
			})
		})
	}
}

type order struct{ Customer string }

func customerOf(_ context.Context, t *asynq.Task) (string, bool) {
	var o order
	if json.Unmarshal(t.Payload(), &o) != nil || o.Customer == "" {
		return "", false
	}
	return o.Customer, true
}

// composeRules: at most 1 export per customer and 3 in all, narrowest
// first.
func composeRules() []asynqmw.Rule {
	return []asynqmw.Rule{
		{Name: "export-customer", Type: "export", Key: customerOf, Limit: 1, AcquireTimeout: 2 * time.Second},
		{Name: "exports", Type: "export", Limit: 3, AcquireTimeout: 2 * time.Second},
	}
}

// observe counts, in Redis and independently of the library, how many
// handlers run at once under key, keeping the peak in key+":peak".
var observe = redis.NewScript(`
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
return n`)

// composeWorker is a child process of TestRulesComposeAcrossProcesses.
func composeWorker() int {
	return childWorker(6, composeRules(), func(rdb *redis.Client) asynq.HandlerFunc {
		return func(ctx context.Context, t *asynq.Task) error {
			bg := context.Background()
			cust, _ := customerOf(ctx, t)
			keys := []string{"running:all", "running:" + cust}
			for _, k := range keys {
				observe.Run(bg, rdb, []string{k, k + ":peak"}, 1)
			}
			time.Sleep(80 * time.Millisecond)
			for _, k := range keys {
				observe.Run(bg, rdb, []string{k, k + ":peak"}, -1)
			}
			rdb.Incr(bg, "done")
			return nil
		}
	})
}

// Two worker processes, each with its own limiter Client, and two rules
// that both match every export: the fleet-wide cap (3) and the
// per-customer cap (1) hold at once.
func TestRulesComposeAcrossProcesses(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	const tasks, customers = 30, 5
	for i := range tasks {
		payload, _ := json.Marshal(order{Customer: fmt.Sprint("c", i%customers)})
		enqueue(t, client, asynq.NewTask("export", payload), asynq.MaxRetry(3))
	}
	for range 2 {
		startChild(t, "compose", srv.Addr())
	}
	redistest.Eventually(t, 60*time.Second, "every export runs", func() bool {
		n, _ := rdb.Get(ctx, "done").Int()
		return n == tasks
	})
	all, _ := rdb.Get(ctx, "running:all:peak").Int()
	if all > 3 || all < 2 {
		t.Fatalf("%d exports at once across the fleet, cap 3", all)
	}
	for c := range customers {
		if p, _ := rdb.Get(ctx, fmt.Sprint("running:c", c, ":peak")).Int(); p != 1 {
			t.Fatalf("customer c%d peaked at %d exports at once, cap 1", c, p)
		}
	}
}

// A rule by queue gates only that queue's tasks; KeyLimit gives a key its
// own limit.
func TestQueueRuleAndKeyLimit(t *testing.T) {
	srv := redistest.StartServer(t)
	mw, err := asynqmw.New(redistest.Limiter(t, srv.Client(t)), []asynqmw.Rule{
		{Name: "slow-queue", Queue: "slow", Limit: 1, AcquireTimeout: time.Second},
		{Name: "tenant", Queue: "fast", Key: customerOf, Limit: 1, AcquireTimeout: time.Second,
			KeyLimit: func(key string) int64 {
				if key == "vip" {
					return 3
				}
				return 0 // Limit
			}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var slow, vip, plain redistest.Gauge
	var done atomic.Int64
	startServer(t, srv.Addr(), 12, func(c *asynq.Config) { c.Queues = map[string]int{"slow": 1, "fast": 1} },
		mw(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			q, _ := asynq.GetQueueName(ctx)
			cust, _ := customerOf(ctx, task)
			c := &slow
			switch {
			case q == "fast" && cust == "vip":
				c = &vip
			case q == "fast":
				c = &plain
			}
			c.Hold(150 * time.Millisecond)
			done.Add(1)
			return nil
		})))
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	for range 4 {
		for _, c := range []string{"vip", "plain"} {
			payload, _ := json.Marshal(order{Customer: c})
			enqueue(t, client, asynq.NewTask("job", payload), asynq.Queue("fast"))
		}
		enqueue(t, client, asynq.NewTask("job", nil), asynq.Queue("slow"))
	}
	redistest.Eventually(t, 30*time.Second, "every task runs", func() bool { return done.Load() == 12 })
	if p := slow.Peak(); p != 1 {
		t.Fatalf("queue slow peaked at %d, cap 1", p)
	}
	if p := plain.Peak(); p != 1 {
		t.Fatalf("customer plain peaked at %d, cap 1", p)
	}
	if p := vip.Peak(); p < 2 || p > 3 {
		t.Fatalf("customer vip peaked at %d, want 2-3 (its KeyLimit is 3)", p)
	}
}

// A KeyLimit below 1 fails the task with a *limiter.ArgumentError naming
// the rule's KeyLimit.
func TestBadKeyLimit(t *testing.T) {
	srv := redistest.StartServer(t)
	mw, err := asynqmw.New(redistest.Limiter(t, srv.Client(t)), []asynqmw.Rule{
		{Name: "k", Limit: 1, Key: func(context.Context, *asynq.Task) (string, bool) { return "x", true },
			KeyLimit: func(string) int64 { return -1 }},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })).ProcessTask(context.Background(), asynq.NewTask("t", nil))
	var arg *limiter.ArgumentError
	if !errors.As(err, &arg) || arg.Arg != "rules[0].KeyLimit" || !errors.Is(err, limiter.ErrInvalidArgument) {
		t.Fatalf("got %v, want a *limiter.ArgumentError naming rules[0].KeyLimit", err)
	}
}

// Nothing is kept per key between tasks but the Client's register of the
// limits in use (limiter/uses.go: ~130 B a name, forgotten two of its 10s
// periods after the name's last use): 3000 tasks of distinct customers
// leave no Semaphore behind (~600 B each).
func TestNoStatePerKey(t *testing.T) {
	srv := redistest.StartServer(t)
	mw, err := asynqmw.New(redistest.Limiter(t, srv.Client(t)), []asynqmw.Rule{{Name: "cust", Limit: 1, Key: customerOf}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	ctx := context.Background()
	run := func(from, n int) {
		for i := range n {
			payload, _ := json.Marshal(order{Customer: fmt.Sprintf("customer-%08d", from+i)})
			if err := h.ProcessTask(ctx, asynq.NewTask("t", payload)); err != nil {
				t.Fatal(err)
			}
		}
	}
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	run(0, 200) // warm up pools and buffers
	before := heap()
	const keys = 3000
	run(1000, keys)
	after := heap()
	grew := int64(after) - int64(before)
	t.Logf("heap grew %d bytes over %d keys (%.0f B/key)", grew, keys, float64(grew)/keys)
	if grew > 250*keys {
		t.Fatalf("heap grew %d bytes over %d distinct keys: per-key state is kept", grew, keys)
	}
}

// A gated task holds an asynq worker slot while it waits. On a server of
// Concurrency 2 whose two slots first go to gated tasks on their last try
// (their permit is held elsewhere), ungated tasks enqueued at the same
// time start once LastTryAcquireTimeout has run out, not at the gated tasks'
// deadline; the gated tasks are then archived as busy.
func TestUngatedTasksWhileGatedWait(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	const lastTry = 500 * time.Millisecond
	mw, err := asynqmw.New(redistest.Limiter(t, rdb), []asynqmw.Rule{{Name: "export", Type: "export", Limit: 1, AcquireTimeout: 200 * time.Millisecond}},
		asynqmw.LastTryAcquireTimeout(lastTry))
	if err != nil {
		t.Fatal(err)
	}
	holdElsewhere(t, rdb, "export")

	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	var gated []*asynq.TaskInfo
	for range 2 {
		gated = append(gated, enqueue(t, client, asynq.NewTask("export", nil), asynq.MaxRetry(0), asynq.Timeout(time.Minute)))
	}
	const ungated = 6
	for range ungated {
		enqueue(t, client, asynq.NewTask("report", nil))
	}
	start := time.Now()
	var mu sync.Mutex
	var starts []time.Duration
	startServer(t, srv.Addr(), 2, nil, mw(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		if task.Type() == "report" {
			mu.Lock()
			starts = append(starts, time.Since(start))
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
		return nil
	})))
	redistest.Eventually(t, 15*time.Second, "every ungated task runs", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(starts) == ungated
	})
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer insp.Close()
	for _, g := range gated {
		ti, err := insp.GetTaskInfo("default", g.ID)
		if err != nil || ti.State != asynq.TaskStateArchived || !strings.Contains(ti.LastErr, "is busy") {
			t.Fatalf("gated last-try task: %+v, %v; want archived as busy", ti, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("Concurrency 2, 2 gated last-try tasks first, LastTryAcquireTimeout %v: ungated tasks started at %v", lastTry, starts)
}

// With MaxGated, a task whose permit never frees stops being re-queued
// for free: once it has been gated longer than the cap, each busy return
// spends a retry, and asynq archives it when they run out.
func TestMaxGatedEndsBusyRequeues(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	mw, err := asynqmw.New(redistest.Limiter(t, rdb), []asynqmw.Rule{{Name: "never", Limit: 1, AcquireTimeout: 100 * time.Millisecond}},
		asynqmw.MaxGated(time.Second, insp))
	if err != nil {
		t.Fatal(err)
	}
	holdElsewhere(t, rdb, "never")
	startServer(t, srv.Addr(), 2, nil, mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })))
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	info := enqueue(t, client, asynq.NewTask("never", nil), asynq.MaxRetry(2))
	start := time.Now()
	var ti *asynq.TaskInfo
	redistest.Eventually(t, 15*time.Second, "the task is archived", func() bool {
		ti, err = insp.GetTaskInfo("default", info.ID)
		return err == nil && ti.State == asynq.TaskStateArchived
	})
	if took := time.Since(start); took < time.Second {
		t.Fatalf("archived after %v, before MaxGated (1s) ran out", took)
	}
	if !strings.Contains(ti.LastErr, "longer than MaxGated") || ti.Retried != 2 {
		t.Fatalf("archived with retried %d, last error %q", ti.Retried, ti.LastErr)
	}
	t.Logf("archived %v after enqueue: %s", time.Since(start).Round(time.Millisecond), ti.LastErr)
}

// With MaxGated, a task on its last try costs no read of asynq's Redis
// when its permit is free: the lookup is made only once it has waited
// AcquireTimeout, and a busy return after that reuses it.
func TestMaxGatedLooksUpOnlyWhenWaiting(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	var trips roundTrips // of the middleware's inspector
	inspRDB := srv.Client(t)
	inspRDB.AddHook(&trips)
	mwInsp := asynq.NewInspectorFromRedisClient(inspRDB)
	// What one lookup costs, once the connection and asynq's script are
	// warm (a task in a queue no server works on).
	warm := enqueue(t, client, asynq.NewTask("warm", nil), asynq.Queue("warm"))
	var lookup int64
	for range 2 {
		trips.n.Store(0)
		if _, err := mwInsp.GetTaskInfo("warm", warm.ID); err != nil {
			t.Fatal(err)
		}
		lookup = trips.n.Load()
	}
	trips.n.Store(0)

	mw, err := asynqmw.New(redistest.Limiter(t, rdb), []asynqmw.Rule{{Name: "last", Limit: 1, AcquireTimeout: time.Second}},
		asynqmw.MaxGated(time.Minute, mwInsp), asynqmw.LastTryAcquireTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var done atomic.Int64
	startServer(t, srv.Addr(), 1, nil, mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		done.Add(1)
		return nil
	})))
	const tasks = 20
	for range tasks {
		enqueue(t, client, asynq.NewTask("t", nil), asynq.MaxRetry(0))
	}
	redistest.Eventually(t, 20*time.Second, "every task runs", func() bool { return done.Load() == tasks })
	if n := trips.n.Load(); n != 0 {
		t.Fatalf("%d round trips to asynq's Redis for %d last-try tasks whose permit was free, want 0", n, tasks)
	}

	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer insp.Close()
	holdElsewhere(t, rdb, "last")
	info := enqueue(t, client, asynq.NewTask("t", nil), asynq.MaxRetry(0))
	redistest.Eventually(t, 20*time.Second, "the gated last try is archived", func() bool {
		ti, err := insp.GetTaskInfo("default", info.ID)
		return err == nil && ti.State == asynq.TaskStateArchived
	})
	if n := trips.n.Load(); n != lookup {
		t.Fatalf("%d round trips for a last try that waited and returned busy, want one lookup (%d)", n, lookup)
	}
}

// The Collector's series are labelled by rule alone: a Key rule over many
// customers is one series. Count reads them; the running gauge counts
// handlers holding a permit.
func TestMetricsByRule(t *testing.T) {
	srv := redistest.StartServer(t)
	metrics := asynqmw.NewCollector()
	mw, err := asynqmw.New(redistest.Limiter(t, srv.Client(t)), []asynqmw.Rule{
		{Name: "per-customer", Key: customerOf, Limit: 1},
		{Name: "all", Limit: 5},
	}, asynqmw.Metrics(metrics))
	if err != nil {
		t.Fatal(err)
	}
	var running float64
	h := mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		running = metrics.Count("", asynqmw.SeriesRunning)
		return nil
	}))
	for i := range 20 {
		payload, _ := json.Marshal(order{Customer: fmt.Sprint("c", i)})
		if err := h.ProcessTask(context.Background(), asynq.NewTask("t", payload)); err != nil {
			t.Fatal(err)
		}
	}
	if running != 2 || metrics.Count("", asynqmw.SeriesRunning) != 0 {
		t.Fatalf("running gauge %v inside the handler (want 2: one per rule), %v after", running, metrics.Count("", asynqmw.SeriesRunning))
	}
	if n := metrics.Count("per-customer", asynqmw.SeriesGated); n != 20 {
		t.Fatalf("gated count of per-customer %v, want 20", n)
	}
	if n := metrics.Count("", asynqmw.SeriesGated); n != 40 {
		t.Fatalf("gated count of all rules %v, want 40", n)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if len(mf.GetMetric()) > 2 {
			t.Fatalf("%s has %d series for 2 rules", mf.GetName(), len(mf.GetMetric()))
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != "rule" {
				t.Fatalf("%s labelled %v, want by rule alone", mf.GetName(), m.GetLabel())
			}
		}
	}
}
