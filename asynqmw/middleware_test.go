package asynqmw_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// TestMain runs the test binary as one of the child processes of the
// multi-process tests (see startChild) when redistest.ChildEnv names it;
// otherwise it starts the redis-server the runnable Examples find in
// REDIS_ADDR.
func TestMain(m *testing.M) {
	redistest.Main(m, map[string]func() int{"crash": crashWorker, "compose": composeWorker,
		"rate": rateWorker, "pause": pauseWorker, "park": parkWorker})
}

// childRedis names the environment variable that gives a child process
// its Redis address, and childQueue the one asynq queue it works on
// (empty: asynq's default queue).
const (
	childRedis = "REDSEM_CHILD_REDIS"
	childQueue = "REDSEM_CHILD_QUEUE"
)

// startChild runs the test binary as the child role (see TestMain) on the
// Redis at addr. At cleanup it is sent SIGTERM, on which its asynq server
// shuts down and its limiter Client closes, and waited for.
func startChild(t *testing.T, role, addr string) *exec.Cmd {
	t.Helper()
	return startChildOn(t, role, addr, "")
}

// startChildOn is startChild for a worker of asynq queue queue alone.
func startChildOn(t *testing.T, role, addr, queue string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), redistest.ChildEnv+"="+role, childRedis+"="+addr, childQueue+"="+queue)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	return cmd
}

// childWorker is the body of a child process: an asynq server (of
// serverConfig) on its Redis whose handler, made by h, goes through the
// middleware of rules, with go-redis and limiter Clients of its own, until
// SIGTERM; the limiter Client closes after the server shut down. It
// returns the process's exit code.
func childWorker(concurrency int, rules []asynqmw.Rule, h func(rdb *redis.Client) asynq.HandlerFunc) int {
	return childWorkerWith(concurrency, rules, nil, h)
}

// childWorkerWith is childWorker with the middleware's options made by
// opts (when not nil) from the child's go-redis Client.
func childWorkerWith(concurrency int, rules []asynqmw.Rule, opts func(rdb *redis.Client) []asynqmw.Option, h func(rdb *redis.Client) asynq.HandlerFunc) int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(childRedis)})
	defer rdb.Close()
	lc, err := limiter.New(rdb, limiter.RestartQuarantine(0))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer lc.Close(context.Background()) // after the server's shutdown, before rdb.Close
	var o []asynqmw.Option
	if opts != nil {
		o = opts(rdb)
	}
	mw, err := asynqmw.New(lc, rules, o...)
	cfg := serverConfig(concurrency)
	if q := os.Getenv(childQueue); q != "" {
		cfg.Queues = map[string]int{q: 1}
	}
	if err == nil {
		err = asynq.NewServerFromRedisClient(rdb, cfg).Run(mw(h(rdb)))
	}
	if err != nil {
		fmt.Println(err)
		return 1
	}
	return 0
}

// serverConfig is the asynq Config of the tests' servers: the retry
// helpers, and busy re-queues and new tasks looked for every 50ms, so that
// tests do not wait asynq's defaults (5s and 1s).
func serverConfig(concurrency int) asynq.Config {
	return asynq.Config{
		Concurrency:              concurrency,
		IsFailure:                asynqmw.IsFailure(nil),
		RetryDelayFunc:           asynqmw.RetryDelay(nil),
		DelayedTaskCheckInterval: 50 * time.Millisecond,
		TaskCheckInterval:        50 * time.Millisecond,
		LogLevel:                 asynq.FatalLevel,
		ShutdownTimeout:          5 * time.Second,
	}
}

// startServer runs an asynq server of serverConfig, adjusted by edit when
// not nil, with h for every task type (mw(h) is what mux.Use(mw) makes),
// shut down at cleanup.
func startServer(t testing.TB, addr string, concurrency int, edit func(*asynq.Config), h asynq.Handler) {
	t.Helper()
	cfg := serverConfig(concurrency)
	if edit != nil {
		edit(&cfg)
	}
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: addr}, cfg)
	if err := srv.Start(h); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
}

func enqueue(t testing.TB, c *asynq.Client, task *asynq.Task, opts ...asynq.Option) *asynq.TaskInfo {
	t.Helper()
	info, err := c.Enqueue(task, append([]asynq.Option{asynq.Retention(time.Hour)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// holdElsewhere takes the mutex name with a limiter Client of its own, as
// another process would, and gives it back at cleanup if the test did not.
func holdElsewhere(t testing.TB, rdb *redis.Client, name string) *limiter.Lease {
	t.Helper()
	mu, err := redistest.Limiter(t, rdb).Mutex(name)
	if err != nil {
		t.Fatal(err)
	}
	held, err := mu.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) })
	return held
}

func TestCapAcrossServers(t *testing.T) {
	srv := redistest.StartServer(t)
	mw, err := asynqmw.New(redistest.Limiter(t, srv.Client(t)), []asynqmw.Rule{
		{Name: "api", TypePrefix: "api:", Limit: 3, AcquireTimeout: 100 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	var (
		c    redistest.Gauge
		done sync.Map
	)
	handler := mw(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		c.Hold(30 * time.Millisecond)
		id, _ := asynq.GetTaskID(ctx)
		done.Store(id, true)
		return nil
	}))
	startServer(t, srv.Addr(), 10, nil, handler)
	startServer(t, srv.Addr(), 10, nil, handler)

	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	const tasks = 100
	for i := range tasks {
		enqueue(t, client, asynq.NewTask("api:call", []byte(fmt.Sprint(i))), asynq.MaxRetry(3))
	}
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer insp.Close()
	var completed []*asynq.TaskInfo
	redistest.Eventually(t, 90*time.Second, "every task completes", func() bool {
		completed, err = insp.ListCompletedTasks("default", asynq.PageSize(tasks+10))
		return err == nil && len(completed) == tasks
	})
	if p := c.Peak(); p > 3 || p < 2 {
		t.Fatalf("peak of %d handlers at once with a limit of 3", p)
	}
	for _, info := range completed {
		if info.Retried != 0 {
			t.Fatalf("task %s was retried %d times: gating spent its retry budget", info.ID, info.Retried)
		}
	}
}

// A task with no retry left waits in its handler rather than being
// archived for being gated.
func TestLastTryWaitsInsteadOfArchiving(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	lc := redistest.Limiter(t, rdb)
	mw, err := asynqmw.New(lc, []asynqmw.Rule{{Name: "export", Type: "export", Limit: 1, AcquireTimeout: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan string, 1)
	startServer(t, srv.Addr(), 2, nil, mw(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		ran <- id
		return nil
	})))
	held := holdElsewhere(t, rdb, "export")
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	info := enqueue(t, client, asynq.NewTask("export", nil), asynq.MaxRetry(0))
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer insp.Close()
	state := func() asynq.TaskState {
		got, err := insp.GetTaskInfo("default", info.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.State
	}
	redistest.Eventually(t, 10*time.Second, "a worker picks the task up", func() bool { return state() == asynq.TaskStateActive })
	time.Sleep(500 * time.Millisecond) // ten AcquireTimeouts
	if s := state(); s != asynq.TaskStateActive {
		t.Fatalf("gated MaxRetry(0) task is %v, want still active (waiting)", s)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-ran:
		if id != info.ID {
			t.Fatalf("ran %s", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the task did not run after the permit freed")
	}
}

func TestLostLeaseCancelsHandler(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	metrics := asynqmw.NewCollector()
	mw, err := asynqmw.New(redistest.Limiter(t, rdb), []asynqmw.Rule{{Name: "slow", Type: "slow", Limit: 1, TTL: time.Second}},
		asynqmw.Metrics(metrics))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	cause := make(chan error, 1)
	startServer(t, srv.Addr(), 1, nil, mw(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil
	})))
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	enqueue(t, client, asynq.NewTask("slow", nil))
	<-started
	keys, _ := rdb.Keys(context.Background(), limiter.DefaultPrefix+"*").Result()
	if len(keys) == 0 {
		t.Fatal("no lease keys while the handler runs")
	}
	rdb.Del(context.Background(), keys...)
	select {
	case err := <-cause:
		if !errors.Is(err, limiter.ErrLeaseLost) {
			t.Fatalf("handler ctx cause %v, want ErrLeaseLost", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler ctx not cancelled after its lease was deleted")
	}
	redistest.Eventually(t, 5*time.Second, "the lost lease is counted", func() bool {
		return metrics.Count("slow", asynqmw.SeriesLost) == 1
	})
}

// A handler cut short by the loss of its lease (here its keys deleted, as
// a Redis restarted empty forgets them) is re-queued as busy, for about
// the rule's TTL: the loss is the fleet's, not the task's failure.
func TestLostLeaseRequeuesTheTask(t *testing.T) {
	err := runUntilLeaseLost(t, func(ctx context.Context) error { return ctx.Err() })
	var be *asynqmw.BusyError
	if !errors.As(err, &be) || be.RetryIn < time.Second || be.RetryIn > 1500*time.Millisecond {
		t.Fatalf("handler cut short by a lost lease returned %v, want a *BusyError re-queueing it after about the TTL", err)
	}
	if asynqmw.IsFailure(nil)(err) {
		t.Errorf("IsFailure(%v) = true: a lost lease spends the task's retry", err)
	}
}

// A failure of the handler's own is its own, lease lost or not.
func TestOwnFailureAfterALostLeaseStays(t *testing.T) {
	own := errors.New("payload invalid")
	err := runUntilLeaseLost(t, func(ctx context.Context) error { return own })
	if !errors.Is(err, own) || errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("got %v, want the handler's own error, not busy", err)
	}
}

// runUntilLeaseLost runs a task whose handler waits until its lease is
// lost (its keys deleted) and then returns what end returns; it returns
// what the gated handler returned.
func runUntilLeaseLost(t *testing.T, end func(ctx context.Context) error) error {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	mw, err := asynqmw.New(redistest.Limiter(t, rdb), []asynqmw.Rule{{Name: "slow", Type: "slow", Limit: 1, TTL: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	returned := make(chan error, 1)
	gated := mw(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return end(ctx)
	}))
	startServer(t, srv.Addr(), 1, nil, asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		err := gated.ProcessTask(ctx, task)
		select {
		case returned <- err:
		default:
		}
		return err
	}))
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	enqueue(t, client, asynq.NewTask("slow", nil))
	<-started
	keys, _ := rdb.Keys(context.Background(), limiter.DefaultPrefix+"*").Result()
	rdb.Del(context.Background(), keys...)
	select {
	case err := <-returned:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("handler did not return after its lease was deleted")
		return nil
	}
}

func TestPerKeyRule(t *testing.T) {
	srv := redistest.StartServer(t)
	mw, err := asynqmw.New(redistest.Limiter(t, srv.Client(t)), []asynqmw.Rule{{
		Name: "orders", Type: "order", Limit: 2, AcquireTimeout: 100 * time.Millisecond,
		Key: func(_ context.Context, t *asynq.Task) (string, bool) {
			var o order
			if json.Unmarshal(t.Payload(), &o) != nil || o.Customer != "A" {
				return "", false // only customer A is capped
			}
			return o.Customer, true
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var a, b redistest.Gauge
	var finished atomic.Int64
	startServer(t, srv.Addr(), 12, nil, mw(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		var o order
		_ = json.Unmarshal(task.Payload(), &o)
		c := &b
		if o.Customer == "A" {
			c = &a
		}
		c.Hold(100 * time.Millisecond)
		finished.Add(1)
		return nil
	})))
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	for i := range 12 {
		customer := "A"
		if i%2 == 1 {
			customer = "B"
		}
		payload, _ := json.Marshal(order{Customer: customer})
		enqueue(t, client, asynq.NewTask("order", payload))
	}
	redistest.Eventually(t, 60*time.Second, "all orders finish", func() bool { return finished.Load() == 12 })
	if p := a.Peak(); p > 2 {
		t.Fatalf("customer A peaked at %d, cap 2", p)
	}
	if p := b.Peak(); p < 3 {
		t.Fatalf("customer B peaked at %d: it should run freely (6 tasks, 12 workers)", p)
	}
}

func TestBadConfig(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { rdb.Close() })
	lc := redistest.Limiter(t, rdb)
	cases := []struct {
		rules []asynqmw.Rule
		arg   string // the *limiter.ArgumentError's Arg
	}{
		{nil, "rules"},
		{[]asynqmw.Rule{{Limit: 1}}, "rules[0].Name"},
		{[]asynqmw.Rule{{Name: "a"}}, "rules[0].Limit"},
		{[]asynqmw.Rule{{Name: "a", Limit: -1}}, "rules[0].Limit"},
		{[]asynqmw.Rule{{Name: "a", Limit: 2, Weight: 3}}, "rules[0].Weight"},
		{[]asynqmw.Rule{{Name: "a", Limit: 2, Weight: -1}}, "rules[0].Weight"},
		{[]asynqmw.Rule{{Name: "a", Limit: 1, Type: "x", TypePrefix: "y"}}, "rules[0].Type"},
		{[]asynqmw.Rule{{Name: "a", Limit: 1, TTL: -time.Second}}, "rules[0].TTL"},
		{[]asynqmw.Rule{{Name: "a", Limit: 1, AcquireTimeout: -1}}, "rules[0].AcquireTimeout"},
		{[]asynqmw.Rule{{Name: "a", Limit: 1, KeyLimit: func(string) int64 { return 1 }}}, "rules[0].Key"},
		{[]asynqmw.Rule{{Name: "a", Limit: 1, Type: "x"}, {Name: "a", Limit: 2, Type: "y"}}, "rules[1].Limit"},
		{[]asynqmw.Rule{{Name: "a", Limit: 1, Key: func(context.Context, *asynq.Task) (string, bool) { return "", false }},
			{Name: "a:b", Limit: 1}}, "rules[1].Name"},
		{[]asynqmw.Rule{{Name: "a", Limit: 1, TTL: time.Microsecond}}, "TTL"}, // the limiter's
		{[]asynqmw.Rule{{Name: "a", Limit: 1}, {Name: "", Limit: 1}}, "rules[1].Name"},
		{[]asynqmw.Rule{{Name: "a", Rate: limiter.Rate{Events: 0, Per: time.Second, Burst: 1}}}, "rules[0].Rate.Events"},
		{[]asynqmw.Rule{{Name: "a", Rate: limiter.Rate{Events: 1, Per: time.Second}}}, "rules[0].Rate.Burst"},
		{[]asynqmw.Rule{{Name: "a", Weight: 1, Rate: limiter.Rate{Events: 1, Per: time.Second, Burst: 1}}}, "rules[0].Weight"},
		{[]asynqmw.Rule{{Name: "a", Rate: limiter.Rate{Events: 1, Per: time.Second, Burst: 1}, Key: customerOf,
			KeyLimit: func(string) int64 { return 1 }}}, "rules[0].Limit"},
		{[]asynqmw.Rule{{Name: "a", Limit: 1, Type: "x"},
			{Name: "a", Limit: 1, Type: "y", Rate: limiter.Rate{Events: 1, Per: time.Second, Burst: 1}}}, "rules[1].Rate"},
	}
	for _, tc := range cases {
		_, err := asynqmw.New(lc, tc.rules)
		var arg *limiter.ArgumentError
		if !errors.As(err, &arg) || arg.Arg != tc.arg || !errors.Is(err, limiter.ErrInvalidArgument) {
			t.Errorf("%+v: got %v, want a *limiter.ArgumentError naming %s", tc.rules, err, tc.arg)
		}
	}
	var arg *limiter.ArgumentError
	if _, err := asynqmw.New(nil, []asynqmw.Rule{{Name: "a", Limit: 1}}); !errors.As(err, &arg) || arg.Arg != "client" {
		t.Errorf("nil client: want an *ArgumentError naming the client, got %v", err)
	}
	for opt, o := range map[string]asynqmw.Option{
		"ReleaseTimeout":        asynqmw.LimiterOptions(limiter.ReleaseTimeout(0)), // the limiter's
		"LastTryAcquireTimeout": asynqmw.LastTryAcquireTimeout(0),
		"MaxGated":              asynqmw.MaxGated(time.Minute, nil),
		"Park":                  asynqmw.Park(nil),
	} {
		if _, err := asynqmw.New(lc, []asynqmw.Rule{{Name: "a", Limit: 1}}, o); !errors.As(err, &arg) || arg.Arg != opt {
			t.Errorf("bad %s: want an *ArgumentError naming it, got %v", opt, err)
		}
	}
	if _, err := asynqmw.New(lc, []asynqmw.Rule{{Name: "a", Limit: 1}}, asynqmw.LimiterOptions(limiter.ClockDrift(0.9))); !errors.As(err, &arg) || arg.Arg != "ClockDrift" {
		t.Errorf("bad limiter option: want an *ArgumentError naming it, got %v", err)
	}
	both := []asynqmw.Rule{{Name: "a", Limit: 1, Rate: limiter.Rate{Events: 1, Per: time.Second, Burst: 1}}}
	for opt, o := range map[string]asynqmw.Option{
		"Adaptive":       asynqmw.RateOptions(limiter.Adaptive(0, 1)),
		"ReleaseTimeout": asynqmw.SemaphoreOptions(limiter.ReleaseTimeout(0)),
	} {
		if _, err := asynqmw.New(lc, both, o); !errors.As(err, &arg) || arg.Arg != opt {
			t.Errorf("bad %s in RateOptions or SemaphoreOptions: want an *ArgumentError naming it, got %v", opt, err)
		}
	}
	if _, err := asynqmw.New(lc, []asynqmw.Rule{{Name: "a", Limit: 1}, {Name: "a", Limit: 1, Type: "x"}}); err != nil {
		t.Errorf("two rules sharing a semaphore with the same limit: %v", err)
	}
	closed, _ := limiter.New(rdb)
	_ = closed.Close(context.Background())
	if _, err := asynqmw.New(closed, []asynqmw.Rule{{Name: "a", Limit: 1}}); !errors.Is(err, limiter.ErrClosed) {
		t.Errorf("closed client: want ErrClosed, got %v", err)
	}
}

// IsFailure and RetryDelay read the *BusyError and *RetryError that New's
// middleware and scheduler.Adopt return, also when wrapped, and leave
// every other error to next (or asynq's defaults).
func TestRetryHelpers(t *testing.T) {
	isFailure := asynqmw.IsFailure(nil)
	delay := asynqmw.RetryDelay(nil)
	busy := &asynqmw.BusyError{Semaphore: "s", RetryIn: 3 * time.Second}
	wrapped := fmt.Errorf("outer: %w", busy)
	exceeded := &asynqmw.BusyError{Semaphore: "s", RetryIn: 3 * time.Second, Exceeded: true}
	retry := fmt.Errorf("outer: %w", &asynqmw.RetryError{RetryIn: 7 * time.Second, Err: errors.New("handler failed")})
	for _, tc := range []struct {
		name    string
		err     error
		failure bool
		delay   time.Duration // 0: asynq's default
	}{
		{"busy", busy, false, 3 * time.Second},
		{"wrapped busy", wrapped, false, 3 * time.Second},
		{"busy past MaxGated", exceeded, true, 3 * time.Second},
		{"retry", retry, true, 7 * time.Second},
		{"other", errors.New("x"), true, 0},
	} {
		if got := isFailure(tc.err); got != tc.failure {
			t.Errorf("%s: IsFailure %v, want %v", tc.name, got, tc.failure)
		}
		d := delay(0, tc.err, asynq.NewTask("t", nil))
		if tc.delay != 0 && d != tc.delay || tc.delay == 0 && d < 15*time.Second {
			t.Errorf("%s: RetryDelay %v, want %v (0: asynq's default, >= 15s)", tc.name, d, tc.delay)
		}
	}
	if !errors.Is(wrapped, limiter.ErrBusy) || errors.Is(retry, limiter.ErrBusy) {
		t.Error("a *BusyError must match limiter.ErrBusy, a *RetryError not")
	}
	if isFailure(nil) {
		t.Error("IsFailure(nil)(nil) must be false, as asynq's default")
	}
	custom := asynqmw.IsFailure(func(error) bool { return false })
	if custom(errors.New("x")) || !custom(exceeded) {
		t.Fatal("IsFailure must defer to next for other errors only")
	}
	delay = asynqmw.RetryDelay(func(int, error, *asynq.Task) time.Duration { return 42 * time.Second })
	if d := delay(1, errors.New("x"), nil); d != 42*time.Second {
		t.Fatalf("RetryDelay must defer to next: %v", d)
	}
	if d := delay(1, busy, nil); d != 3*time.Second {
		t.Fatalf("RetryDelay must not defer a *BusyError to next: %v", d)
	}
}

// crashWorker is the child process of TestKilledWorkerFreesPermit: a
// worker whose handler runs until the process is killed.
func crashWorker() int {
	return childWorker(2, []asynqmw.Rule{{Name: "crash", Type: "crash", Limit: 2, TTL: 2 * time.Second}},
		func(rdb *redis.Client) asynq.HandlerFunc {
			return func(ctx context.Context, task *asynq.Task) error {
				id, _ := asynq.GetTaskID(ctx)
				rdb.Set(ctx, "started", id, 0)
				<-ctx.Done() // runs until killed
				return nil
			}
		})
}

// A worker killed -9 mid-task: its permit comes back within the lease TTL
// (not the task's timeout). The lease names that one run (queue, task id,
// retry count, random part): asynq's later retry of the task takes a
// permit of its own and never shares the dead run's.
func TestKilledWorkerFreesPermit(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	cmd := startChild(t, "crash", srv.Addr())
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	info := enqueue(t, client, asynq.NewTask("crash", nil), asynq.Timeout(time.Hour))
	redistest.Eventually(t, 20*time.Second, "the worker starts the task", func() bool {
		return rdb.Get(ctx, "started").Val() == info.ID
	})
	lc := redistest.Limiter(t, rdb)
	sem, _ := lc.Semaphore("crash", 2, limiter.TTL(2*time.Second))
	hs, err := inspect.New(lc).Holders(ctx, "crash")
	if err != nil || len(hs) != 1 || !strings.HasPrefix(hs[0].ID, "default:"+info.ID+":0:") {
		t.Fatalf("holders while the task runs: %+v, %v (want one lease named default:%s:0:...)", hs, err, info.ID)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()

	// Another run takes the free permit at once, beside the dead one.
	other, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("the second permit while the dead run's lease lives: %v", err)
	}
	defer other.Release(ctx)
	redistest.Eventually(t, 10*time.Second, "the dead run's lease lapses", func() bool {
		hs, _ := inspect.New(lc).Holders(ctx, "crash")
		return len(hs) == 1
	})
	if took := time.Since(killed); took > 5*time.Second {
		t.Fatalf("permit back after %v; TTL 2s (task timeout 1h)", took)
	}
}

// A task whose deadline comes before AcquireTimeout returns busy just before it,
// so the wait costs no retry.
func TestDeadlineBeforeAcquireTimeoutIsBusy(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	mw, err := asynqmw.New(redistest.Limiter(t, rdb), []asynqmw.Rule{{Name: "short", Type: "short", Limit: 1, AcquireTimeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	startServer(t, srv.Addr(), 1, nil, mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })))
	holdElsewhere(t, rdb, "short")
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	info := enqueue(t, client, asynq.NewTask("short", nil), asynq.Timeout(2*time.Second), asynq.MaxRetry(3))
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer insp.Close()
	redistest.Eventually(t, 15*time.Second, "the task comes back busy", func() bool {
		ti, err := insp.GetTaskInfo("default", info.ID)
		return err == nil && ti.LastErr != ""
	})
	ti, _ := insp.GetTaskInfo("default", info.ID)
	if ti.Retried != 0 || !strings.Contains(ti.LastErr, "is busy") {
		t.Fatalf("retried %d, last error %q: want a busy return before the deadline, no retry spent", ti.Retried, ti.LastErr)
	}
}

// A handler that outlives its context (asynq gave up on it) keeps its
// lease while it runs and releases it when it returns, well before the
// TTL.
func TestAbandonedHandlerReleasesOnReturn(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const ttl = 10 * time.Second
	mw, err := asynqmw.New(redistest.Limiter(t, rdb), []asynqmw.Rule{{Name: "zombie", Type: "zombie", Limit: 1, TTL: ttl}})
	if err != nil {
		t.Fatal(err)
	}
	started, returned := make(chan struct{}), make(chan struct{})
	var runs atomic.Int64
	startServer(t, srv.Addr(), 1, nil, mw(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		if runs.Add(1) > 1 {
			return nil // asynq's retry comes 15s+ later; not waited for
		}
		close(started)
		time.Sleep(2 * time.Second) // ignores its 1s deadline
		close(returned)
		return nil
	})))
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	// asynq counts timeouts in whole seconds.
	info := enqueue(t, client, asynq.NewTask("zombie", nil), asynq.Timeout(time.Second), asynq.MaxRetry(1))
	<-started
	in := inspect.New(redistest.Limiter(t, rdb)) // another process
	hs, err := in.Holders(ctx, "zombie")
	if err != nil || len(hs) != 1 || !strings.HasPrefix(hs[0].ID, "default:"+info.ID+":") {
		t.Fatalf("holders while the handler runs: %+v, %v (want its lease)", hs, err)
	}
	<-returned
	back := time.Now()
	redistest.Eventually(t, ttl, "the abandoned handler releases", func() bool {
		hs, _ := in.Holders(ctx, "zombie")
		return len(hs) == 0
	})
	if took := time.Since(back); took > ttl/2 {
		t.Fatalf("lease gone %v after the handler returned: it lapsed (TTL %v) rather than being released", took, ttl)
	}
}

// sliceError is an error type whose values cannot be compared with ==.
type sliceError []string

func (e sliceError) Error() string { return strings.Join(e, ", ") }

// The middleware, called directly: the handler sees its lease, the task
// returns the handler's own error (whatever its type), and a handler that
// returns or panics gives its permit back at once.
func TestHandlerErrorsAndPanics(t *testing.T) {
	srv := redistest.StartServer(t)
	lc := redistest.Limiter(t, srv.Client(t))
	mw, err := asynqmw.New(lc, []asynqmw.Rule{{Name: "direct", Limit: 1}})
	if err != nil {
		t.Fatal(err)
	}
	sem, _ := lc.Semaphore("direct", 1)
	ctx := context.Background()
	task := asynq.NewTask("direct", nil)
	free := func() bool {
		n, err := redistest.Available(ctx, inspect.New(lc), sem.Name(), sem.Limit())
		return err == nil && n == 1
	}

	var token int64
	err = mw(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		if l, ok := limiter.LeaseFrom(ctx); ok {
			token = l.Token()
		}
		return sliceError{"a", "b"}
	})).ProcessTask(ctx, task)
	var se sliceError
	if !errors.As(err, &se) || len(se) != 2 || errors.Is(err, limiter.ErrLeaseLost) {
		t.Fatalf("task returned %v (%T), want the handler's sliceError unchanged", err, err)
	}
	if token == 0 {
		t.Fatal("limiter.LeaseFrom in the handler: no lease")
	}
	if !free() {
		t.Fatal("permit not back after the handler returned an error")
	}

	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the handler's panic", r)
			}
		}()
		_ = mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { panic("boom") })).ProcessTask(ctx, task)
	}()
	if !free() {
		t.Fatal("permit not back after the handler panicked")
	}
}
