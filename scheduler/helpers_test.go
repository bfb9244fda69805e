package scheduler_test

import (
	"context"
	"maps"
	"sync"
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
