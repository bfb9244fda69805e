package asynqmw_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// stamp appends the Redis server's time (µs) to the list KEYS[1]: an
// observer's clock, independent of the library's. It is formatted by
// hand, as Lua would print it as 1.7e+15.
var stamp = redis.NewScript(`
local t = redis.call('TIME')
return redis.call('RPUSH', KEYS[1], t[1] .. string.sub('00000' .. t[2], -6))`)

// stamps reads the times stamp appended to key.
func stamps(t *testing.T, rdb *redis.Client, key string) []int64 {
	t.Helper()
	vs, err := rdb.LRange(context.Background(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ts []int64
	for _, v := range vs {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, n)
	}
	slices.Sort(ts)
	return ts
}

// mostInWindow is the most of the sorted times ts (µs) that fall in one
// window of length w.
func mostInWindow(ts []int64, w time.Duration) int {
	most, j := 0, 0
	for i := range ts {
		for ts[i]-ts[j] >= w.Microseconds() {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// rateRule caps partner calls at 20 a second (burst 3) and 2 at once,
// fleet-wide: 2 permits of 50ms would allow 40 a second.
var rateRule = asynqmw.Rule{Name: "partner", TypePrefix: "partner:", Limit: 2,
	Rate: limiter.Rate{Events: 20, Per: time.Second, Burst: 3}, AcquireTimeout: time.Second}

// rateWorker is a child process of TestRateAcrossProcesses.
func rateWorker() int {
	return childWorker(6, []asynqmw.Rule{rateRule}, func(rdb *redis.Client) asynq.HandlerFunc {
		return func(ctx context.Context, t *asynq.Task) error {
			bg := context.Background()
			stamp.Run(bg, rdb, []string{"starts"})
			observe.Run(bg, rdb, []string{"running", "running:peak"}, 1)
			time.Sleep(50 * time.Millisecond)
			observe.Run(bg, rdb, []string{"running", "running:peak"}, -1)
			rdb.Incr(bg, "done")
			return nil
		}
	})
}

// Two worker processes share a rule's rate and its limit: by the Redis
// server's clock, no window of 1s holds more handler starts than Burst +
// Events (plus what limiter.Lateness allows: none at 20/s), the limit
// holds, and tasks the rate re-queued spent no retry.
func TestRateAcrossProcesses(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	const tasks = 60
	for i := range tasks {
		enqueue(t, client, asynq.NewTask("partner:call", []byte(fmt.Sprint(i))), asynq.MaxRetry(3))
	}
	for range 2 {
		startChild(t, "rate", srv.Addr())
	}
	redistest.Eventually(t, 30*time.Second, "every call runs", func() bool {
		n, _ := rdb.Get(ctx, "done").Int()
		return n == tasks
	})
	starts := stamps(t, rdb, "starts")
	r := rateRule.Rate
	most, bound := mostInWindow(starts, time.Second), int(r.Burst+r.Events*int64(time.Second+20*time.Millisecond)/int64(time.Second))
	took := time.Duration(starts[len(starts)-1]-starts[0]) * time.Microsecond
	t.Logf("%d starts over %v; most in one 1s window %d (bound %d)", len(starts), took.Round(time.Millisecond), most, bound)
	if most > bound || most < bound-5 {
		t.Fatalf("%d handler starts in one second, rate %v: want at most %d (and near it)", most, r, bound)
	}
	if p, _ := rdb.Get(ctx, "running:peak").Int(); p > int(rateRule.Limit) {
		t.Fatalf("%d handlers at once, limit %d", p, rateRule.Limit)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	redistest.Eventually(t, 10*time.Second, "every task completed", func() bool {
		done, err := insp.ListCompletedTasks("default", asynq.PageSize(tasks+10))
		return err == nil && len(done) == tasks
	})
	done, _ := insp.ListCompletedTasks("default", asynq.PageSize(tasks+10))
	for _, ti := range done {
		if ti.Retried != 0 {
			t.Fatalf("task %s retried %d times: a rate's re-queue spent a retry", ti.ID, ti.Retried)
		}
	}
}

// A task waits for a far rate slot holding no permit: while the second
// and third of three tasks (limit 1, one start per 2s, further off than
// a task holding permits waits) wait for theirs, another process takes
// the permit at once.
func TestNoPermitHeldWhileWaitingForSlot(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	metrics := asynqmw.NewCollector()
	mw, err := asynqmw.New(redistest.Limiter(t, rdb), []asynqmw.Rule{{Name: "slot", Limit: 1,
		Rate: limiter.Rate{Events: 1, Per: 2 * time.Second, Burst: 1}, AcquireTimeout: 5 * time.Second}}, asynqmw.Metrics(metrics))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var starts []time.Time
	first := make(chan struct{}, 3)
	h := mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		first <- struct{}{}
		return nil
	}))
	errs := make(chan error, 3)
	for range 3 {
		go func() { errs <- h.ProcessTask(ctx, asynq.NewTask("t", nil)) }()
	}
	<-first
	time.Sleep(300 * time.Millisecond) // the others sleep until +2s and +4s
	other, err := redistest.Limiter(t, rdb).Semaphore("slot", 1)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := other.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("the permit, while two tasks wait for their rate slots: %v (a waiting task holds it)", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < 1900*time.Millisecond {
			t.Fatalf("starts %v apart at one per 2s", gap)
		}
	}
	if n := metrics.Count("slot", asynqmw.SeriesRateWaits); n != 2 {
		t.Fatalf("%v rate waits counted, want 2", n)
	}
}

// A slot too far off re-queues the task (a *BusyError with Rate set and
// RetryIn the slot's wait, no retry spent), per key for a Key rule, and a
// rule with a Rate needs no Limit.
func TestRateBusyPerKey(t *testing.T) {
	srv := redistest.StartServer(t)
	metrics := asynqmw.NewCollector()
	mw, err := asynqmw.New(redistest.Limiter(t, srv.Client(t)), []asynqmw.Rule{{Name: "per-customer", Key: customerOf,
		Rate: limiter.Rate{Events: 1, Per: 10 * time.Second, Burst: 1}, AcquireTimeout: 100 * time.Millisecond}}, asynqmw.Metrics(metrics))
	if err != nil {
		t.Fatal(err)
	}
	h := mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	task := func(customer string) *asynq.Task {
		return asynq.NewTask("t", []byte(`{"Customer":"`+customer+`"}`))
	}
	ctx := context.Background()
	if err := h.ProcessTask(ctx, task("a")); err != nil {
		t.Fatal(err)
	}
	err = h.ProcessTask(ctx, task("a"))
	var busy *asynqmw.BusyError
	if !errors.As(err, &busy) || !busy.Rate || busy.Semaphore != "per-customer:a" || asynqmw.IsFailure(nil)(err) {
		t.Fatalf("second call of customer a: %v, want a *BusyError of its rate, not a failure", err)
	}
	if busy.RetryIn < 9*time.Second || busy.RetryIn > 15*time.Second {
		t.Fatalf("RetryIn %v, want the slot's wait (~10s, spread up to 1½×)", busy.RetryIn)
	}
	if err := h.ProcessTask(ctx, task("b")); err != nil {
		t.Fatalf("customer b has a rate of its own: %v", err)
	}
	if n := metrics.Count("per-customer", asynqmw.SeriesRequeued); n != 1 {
		t.Fatalf("%v busy re-queues counted, want 1", n)
	}
}

// A permit that comes late costs no rate slot, and the starts do not
// bunch: four tasks wait for the permit held elsewhere, and when it
// frees they start 200ms apart, each on a slot reserved while it held
// the permit, with no slot left unused.
func TestLatePermitLosesNoSlot(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	metrics := asynqmw.NewCollector()
	mw, err := asynqmw.New(redistest.Limiter(t, rdb), []asynqmw.Rule{{Name: "late", Limit: 1,
		Rate: limiter.Rate{Events: 5, Per: time.Second, Burst: 1}, AcquireTimeout: 5 * time.Second}}, asynqmw.Metrics(metrics))
	if err != nil {
		t.Fatal(err)
	}
	held := holdElsewhere(t, rdb, "late")
	var mu sync.Mutex
	var starts []int64
	h := mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		mu.Lock()
		starts = append(starts, time.Now().UnixMicro())
		mu.Unlock()
		return nil
	}))
	const tasks = 4
	errs := make(chan error, tasks)
	for range tasks {
		go func() { errs <- h.ProcessTask(ctx, asynq.NewTask("t", nil)) }()
	}
	time.Sleep(time.Second) // past the slots they would have reserved first
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range tasks {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(starts)
	// One event's time is 200ms; a start may be up to 20ms late for its
	// slot (limiter.Lateness), and timers a little more.
	const window = 150 * time.Millisecond
	if most := mostInWindow(starts, window); most > 1 {
		t.Fatalf("%d starts within %v at 5/s burst 1 (starts at %v µs)", most, window, starts)
	}
	if n := metrics.Count("late", asynqmw.SeriesRateUnused); n != 0 {
		t.Fatalf("%v unused slots counted, want none", n)
	}
}

// One rule's AcquireTimeout does not cut another rule's wait short: a
// task takes its customer's permit (AcquireTimeout 100ms) at once and
// then waits 500ms for the fleet's (AcquireTimeout 5s), and runs.
func TestEachRuleBoundsItsOwnWait(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	mw, err := asynqmw.New(redistest.Limiter(t, rdb), []asynqmw.Rule{
		{Name: "customer", Key: customerOf, Limit: 1, AcquireTimeout: 100 * time.Millisecond},
		{Name: "fleet", Limit: 1, Rate: limiter.Rate{Events: 100, Per: time.Second, Burst: 1}, AcquireTimeout: 5 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	held := holdElsewhere(t, rdb, "fleet")
	time.AfterFunc(500*time.Millisecond, func() { _ = held.Release(ctx) })
	ran := false
	err = mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		ran = true
		return nil
	})).ProcessTask(ctx, asynq.NewTask("t", []byte(`{"Customer":"a"}`)))
	if err != nil || !ran {
		t.Fatalf("got %v (ran %v), want the task to wait for the fleet's permit and run", err, ran)
	}
}
