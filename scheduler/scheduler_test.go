package scheduler_test

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/scheduler"
)

type env struct {
	addr    string
	rdb     *redis.Client
	lc      *limiter.Client // the test process's
	client  *asynq.Client
	insp    *asynq.Inspector
	metrics *scheduler.Collector
}

func newEnv(t *testing.T) env {
	srv := redistest.StartServer(t)
	e := env{addr: srv.Addr(), rdb: srv.Client(t), metrics: scheduler.NewCollector(),
		client: asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()}),
		insp:   asynq.NewInspector(asynq.RedisClientOpt{Addr: srv.Addr()})}
	e.lc = redistest.Limiter(t, e.rdb)
	t.Cleanup(func() { e.client.Close(); e.insp.Close() })
	return e
}

// worker runs an asynq server whose handlers go through Adopt, with its
// own limiter Client, as a worker process would.
func (e env) worker(t *testing.T, h asynq.HandlerFunc, opts ...scheduler.Option) {
	e.workerWith(t, asynq.Config{Concurrency: 4, LogLevel: asynq.FatalLevel}, h, opts...)
}

// workerWith is worker with the asynq Config cfg.
func (e env) workerWith(t *testing.T, cfg asynq.Config, h asynq.HandlerFunc, opts ...scheduler.Option) {
	mw, err := scheduler.Adopt(redistest.Limiter(t, e.rdb), append([]scheduler.Option{scheduler.Metrics(e.metrics)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: e.addr}, cfg)
	if err := srv.Start(mw(h)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
}

// countRuns runs a worker that counts the runs of each task id; the
// returned func reads the counts.
func (e env) countRuns(t *testing.T) func() map[string]int {
	var mu sync.Mutex
	seen := map[string]int{}
	e.worker(t, func(ctx context.Context, _ *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		mu.Lock()
		seen[id]++
		mu.Unlock()
		return nil
	})
	return func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(seen)
	}
}

// schedulers starts two schedulers of job, the second lag after the
// first, each with limiter and asynq clients of its own as separate
// processes would have. stop stops both and waits for their ticks.
func (e env) schedulers(t *testing.T, job scheduler.Job, lag time.Duration) (stop func()) {
	var ss []*scheduler.Scheduler
	for i := range 2 {
		if i == 1 {
			time.Sleep(lag)
		}
		client := asynq.NewClient(asynq.RedisClientOpt{Addr: e.addr})
		t.Cleanup(func() { client.Close() })
		s, err := scheduler.New(redistest.Limiter(t, e.rdb), client)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Register(job); err != nil {
			t.Fatal(err)
		}
		s.Start()
		ss = append(ss, s)
	}
	return func() {
		for _, s := range ss {
			<-s.Stop().Done()
		}
	}
}

func TestHandoffToWorker(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s, err := scheduler.New(e.lc, e.client, scheduler.Metrics(e.metrics))
	if err != nil {
		t.Fatal(err)
	}
	job := scheduler.Job{Name: "export", TaskType: "export", TTL: 30 * time.Second}
	lock, _ := e.lc.Mutex("export")
	release := make(chan struct{})
	held := make(chan []limiter.Holder, 1)
	tokens := make(chan int64, 1)
	e.worker(t, func(ctx context.Context, task *asynq.Task) error {
		hs, _ := lock.Holders(ctx)
		held <- hs
		if l, ok := limiter.LeaseFrom(ctx); ok {
			tokens <- l.Token()
		} else {
			tokens <- 0
		}
		<-release
		return nil
	})
	info, err := s.Enqueue(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	hs := <-held
	if len(hs) != 1 {
		t.Fatalf("%d holders of the lock while the adopted handler runs", len(hs))
	}
	if tok := <-tokens; tok != hs[0].Token || tok == 0 {
		t.Fatalf("limiter.LeaseFrom in the handler: token %d, want the adopted lease's %d", tok, hs[0].Token)
	}
	if _, err := s.Enqueue(ctx, job); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("second run while the first holds the lock: want ErrBusy, got %v", err)
	}
	close(release)
	redistest.Eventually(t, 10*time.Second, "the worker releases the lock", func() bool {
		n, _ := lock.Available(ctx)
		return n == 1
	})
	if e.metrics.Count("export", scheduler.EventAdopted) != 1 || e.metrics.Count("export", scheduler.EventSkippedBusy) != 1 {
		t.Fatal("adopted/skipped counters")
	}
	if info.ID == "" {
		t.Fatal("no task id")
	}
}

// A task whose lease expired before a worker picked it up is skipped.
func TestExpiredTicketIsSkipped(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s, _ := scheduler.New(e.lc, e.client, scheduler.Metrics(e.metrics))
	info, err := s.Enqueue(ctx, scheduler.Job{Name: "late", TaskType: "late", TTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // no worker yet: the lock expires
	var ran atomic.Bool
	e.worker(t, func(context.Context, *asynq.Task) error { ran.Store(true); return nil })
	redistest.Eventually(t, 20*time.Second, "the task is archived", func() bool {
		ti, err := e.insp.GetTaskInfo("default", info.ID)
		return err == nil && ti.State == asynq.TaskStateArchived
	})
	if ran.Load() {
		t.Fatal("the handler ran without the lock")
	}
	if e.metrics.Count("late", scheduler.EventAdoptFailed) != 1 {
		t.Fatal("adopt failure not counted")
	}
}

func TestLostLockCancelsHandler(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s, _ := scheduler.New(e.lc, e.client, scheduler.LimiterOptions(limiter.Prefix("sched-lost:")))
	cause := make(chan error, 1)
	started := make(chan struct{})
	e.worker(t, func(ctx context.Context, _ *asynq.Task) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil
	}, scheduler.WorkerTTL(time.Second), scheduler.LimiterOptions(limiter.Prefix("sched-lost:")))
	if _, err := s.Enqueue(ctx, scheduler.Job{Name: "lost", TaskType: "lost"}); err != nil {
		t.Fatal(err)
	}
	<-started
	keys, _ := e.rdb.Keys(ctx, "sched-lost:*").Result()
	e.rdb.Del(ctx, keys...)
	select {
	case err := <-cause:
		if !errors.Is(err, limiter.ErrLeaseLost) {
			t.Fatalf("cause %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler not cancelled after its lock was lost")
	}
}

// A handler that outlives its context (asynq gave up on it at its
// deadline) releases the lock when it returns, not at the worker's TTL.
func TestAbandonedHandlerReleasesOnReturn(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s, _ := scheduler.New(e.lc, e.client)
	returned := make(chan struct{})
	var runs atomic.Int64
	e.worker(t, func(ctx context.Context, _ *asynq.Task) error {
		if runs.Add(1) == 1 {
			time.Sleep(2 * time.Second) // ignores its 1s deadline
			close(returned)
		}
		return nil
	})
	// asynq counts timeouts in whole seconds; WorkerTTL is 10s.
	if _, err := s.Enqueue(ctx, scheduler.Job{Name: "zombie", TaskType: "zombie", Options: []asynq.Option{asynq.Timeout(time.Second)}}); err != nil {
		t.Fatal(err)
	}
	<-returned
	back := time.Now()
	lock, _ := e.lc.Mutex("zombie")
	redistest.Eventually(t, 10*time.Second, "the lock is released", func() bool {
		n, _ := lock.Available(ctx)
		return n == 1
	})
	if took := time.Since(back); took > 3*time.Second {
		t.Fatalf("lock free %v after the handler returned: it lapsed rather than being released", took)
	}
}

// A job every second whose handler takes 2.5s: ticks are skipped while a
// run holds the lock, and runs never overlap.
func TestCronSkipsWhileHeld(t *testing.T) {
	e := newEnv(t)
	var running, overlaps, runs atomic.Int64
	e.worker(t, func(ctx context.Context, _ *asynq.Task) error {
		if running.Add(1) > 1 {
			overlaps.Add(1)
		}
		runs.Add(1)
		time.Sleep(2500 * time.Millisecond)
		running.Add(-1)
		return nil
	})
	s, _ := scheduler.New(e.lc, e.client, scheduler.Metrics(e.metrics))
	if err := s.Register(scheduler.Job{Name: "tick", Spec: "* * * * * *", TaskType: "tick", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	s.Start()
	time.Sleep(6 * time.Second)
	<-s.Stop().Done()
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping runs", overlaps.Load())
	}
	if e.metrics.Count("tick", scheduler.EventSkippedBusy) < 2 || runs.Load() < 1 {
		t.Fatalf("skipped %v ticks, %d runs", e.metrics.Count("tick", scheduler.EventSkippedBusy), runs.Load())
	}
}

func TestBadJobs(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"})
	defer client.Close()
	lc := redistest.Limiter(t, rdb)
	s, err := scheduler.New(lc, client)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]scheduler.Job{
		"no name":   {Spec: "@every 1s", TaskType: "x"},
		"no type":   {Name: "a", Spec: "@every 1s"},
		"bad spec":  {Name: "a", Spec: "every second", TaskType: "x"},
		"bad limit": {Name: "a", Spec: "@every 1s", TaskType: "x", Limit: -1},
		"bad TTL":   {Name: "a", Spec: "@every 1s", TaskType: "x", TTL: -1},
		"prefix {}": {Name: "a", Spec: "@every 1s", TaskType: "x"},
	}
	for name, job := range cases {
		s := s
		if name == "prefix {}" {
			s, _ = scheduler.New(lc, client, scheduler.LimiterOptions(limiter.Prefix("{")))
		}
		if err := s.Register(job); !errors.Is(err, limiter.ErrInvalidArgument) {
			t.Errorf("%s: want an invalid-argument error, got %v", name, err)
		}
	}
	var arg *limiter.ArgumentError
	if _, err := scheduler.New(lc, nil); !errors.As(err, &arg) || arg.Arg != "client" {
		t.Errorf("nil asynq client: %v", err)
	}
	if _, err := scheduler.New(nil, client); !errors.As(err, &arg) || arg.Arg != "lc" {
		t.Errorf("nil limiter client: %v", err)
	}
	if _, err := scheduler.Adopt(nil); !errors.As(err, &arg) || arg.Arg != "lc" {
		t.Errorf("nil limiter client in Adopt: %v", err)
	}
	if _, err := scheduler.Adopt(lc, scheduler.WorkerTTL(-1)); !errors.As(err, &arg) || arg.Arg != "TTL" {
		t.Errorf("bad WorkerTTL: %v", err)
	}
}

// Two schedulers of one job, fast runs, the second started late: each
// tick runs once, even though a run finishes (and frees the lock) before
// the other scheduler's copy of the tick arrives; and ticks fall at the
// same instants in both, for cron specs and for "@every" (on even seconds
// for a 2s period, however far apart the schedulers started).
func TestTwoSchedulersOneRunPerTick(t *testing.T) {
	for _, c := range []struct {
		spec   string
		period int64 // seconds: every tick falls on a multiple
		lag    time.Duration
	}{
		{"* * * * * *", 1, 300 * time.Millisecond},
		{"@every 2s", 2, time.Second},
		{"*/2 * * * * *", 2, time.Second},
	} {
		t.Run(c.spec, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			runs := e.countRuns(t)
			stop := e.schedulers(t, scheduler.Job{Name: "tick", Spec: c.spec, TaskType: "tick", TTL: 10 * time.Second}, c.lag)
			time.Sleep(4500 * time.Millisecond)
			stop()
			time.Sleep(500 * time.Millisecond)
			seen := runs()
			if len(seen) < 2 {
				t.Fatalf("only %d ticks ran", len(seen))
			}
			for id, n := range seen {
				sec, _ := strconv.ParseInt(id[strings.LastIndexByte(id, ':')+1:], 10, 64)
				if n != 1 || sec%c.period != 0 {
					t.Fatalf("tick %s ran %d times; ticks %v: want each once, every %ds", id, n, seen, c.period)
				}
			}
		})
	}
}
