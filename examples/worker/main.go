// Command worker is the demo of redsem's asynq middleware: a fleet of asynq
// servers (several in one process, standing in for many hosts) works
// through a batch of tasks that each call a fake third-party API, and the
// middleware keeps at most 5 calls in flight across the whole fleet.
//
//	go run ./examples/worker                    # embedded Redis (miniredis)
//	go run ./examples/worker -redis localhost:6379
//
// It prints live progress, then a report with the API's observed peak
// concurrency, and exits. Prometheus metrics are served on -metrics.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/limiter"
)

func main() {
	addr := flag.String("redis", os.Getenv("REDIS_ADDR"), "Redis address (default: an embedded miniredis)")
	servers := flag.Int("servers", 4, "asynq servers (stand-ins for worker hosts)")
	concurrency := flag.Int("concurrency", 5, "handlers per server")
	tasks := flag.Int("tasks", 120, "tasks to run")
	limit := flag.Int64("limit", 5, "calls the partner API allows at once, fleet-wide")
	metricsAddr := flag.String("metrics", "127.0.0.1:0", "where to serve /metrics")
	flag.Parse()
	if err := run(*addr, *servers, *concurrency, *tasks, *limit, *metricsAddr); err != nil {
		log.Fatal(err)
	}
}

// fakeAPI is the third-party service: it counts calls in flight and
// remembers the peak, which is the number the cap must keep at or below
// the limit.
type fakeAPI struct {
	inFlight, peak, calls atomic.Int64
}

func (a *fakeAPI) call(ctx context.Context) error {
	n := a.inFlight.Add(1)
	defer a.inFlight.Add(-1)
	for p := a.peak.Load(); n > p && !a.peak.CompareAndSwap(p, n); p = a.peak.Load() {
	}
	a.calls.Add(1)
	select {
	case <-time.After(time.Duration(40+rand.IntN(80)) * time.Millisecond):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func run(addr string, servers, concurrency, tasks int, limit int64, metricsAddr string) error {
	where := addr
	if addr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		addr, where = mr.Addr(), "embedded miniredis at "+mr.Addr()
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", addr, err)
	}
	// One limiter Client per process. Deferred calls run last-in
	// first-out: it closes after the asynq servers shut down (below) and
	// before rdb.
	lc, err := limiter.New(rdb)
	if err != nil {
		return err
	}
	defer lc.Close(context.Background())

	reg := prometheus.NewRegistry()
	mwMetrics, semMetrics := asynqmw.NewCollector(), limiter.NewCollector()
	reg.MustRegister(mwMetrics, semMetrics)
	ln, err := net.Listen("tcp", metricsAddr)
	if err != nil {
		return err
	}
	go http.Serve(ln, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	// Every task type under "partner:" shares one fleet-wide cap.
	mw, err := asynqmw.New(lc, []asynqmw.Rule{
		{Name: "partner-api", TypePrefix: "partner:", Limit: limit, MaxWait: 150 * time.Millisecond},
	}, asynqmw.Metrics(mwMetrics), asynqmw.LimiterOptions(limiter.Metrics(semMetrics)),
		asynqmw.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	api := &fakeAPI{}
	var done atomic.Int64
	mux := asynq.NewServeMux()
	mux.Use(mw)
	mux.HandleFunc("partner:sync", func(ctx context.Context, t *asynq.Task) error {
		if err := api.call(ctx); err != nil {
			return err
		}
		done.Add(1)
		return nil
	})

	redisOpt := asynq.RedisClientOpt{Addr: addr}
	for range servers {
		srv := asynq.NewServer(redisOpt, asynq.Config{
			Concurrency:              concurrency,
			IsFailure:                asynqmw.IsFailure(nil),
			RetryDelayFunc:           asynqmw.RetryDelay(nil),
			DelayedTaskCheckInterval: 200 * time.Millisecond,
			LogLevel:                 asynq.FatalLevel,
		})
		if err := srv.Start(mux); err != nil {
			return err
		}
		defer srv.Shutdown()
	}

	fmt.Printf("redsem worker demo: %d asynq servers × %d handlers on %s\n", servers, concurrency, where)
	fmt.Printf("%d tasks call a partner API that allows %d calls at once; metrics on http://%s/metrics\n\n",
		tasks, limit, ln.Addr())
	client := asynq.NewClient(redisOpt)
	defer client.Close()
	start := time.Now()
	for i := range tasks {
		if _, err := client.Enqueue(asynq.NewTask("partner:sync", []byte(fmt.Sprint(i))), asynq.MaxRetry(5)); err != nil {
			return err
		}
	}

	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(3 * time.Minute)
	for done.Load() < int64(tasks) {
		select {
		case <-tick.C:
			fmt.Printf("\r  done %3d/%d   API calls in flight %d   peak %d/%d   busy re-queues %3.0f   ",
				done.Load(), tasks, api.inFlight.Load(), api.peak.Load(), limit, requeued(mwMetrics))
		case <-deadline:
			return errors.New("gave up after 3 minutes")
		}
	}
	wall := time.Since(start)
	fmt.Printf("\r  done %3d/%d%60s\n\n", done.Load(), tasks, "")
	fmt.Printf("report\n  tasks done          %d\n  API peak in flight  %d (limit %d)\n  busy re-queues      %.0f\n  wall time           %v\n",
		done.Load(), api.peak.Load(), limit, requeued(mwMetrics), wall.Round(time.Millisecond))
	if api.peak.Load() > limit {
		return fmt.Errorf("the API saw %d calls at once, over the limit %d", api.peak.Load(), limit)
	}
	return nil
}

// requeued sums redsem_asynq_requeued_busy_total over rules.
func requeued(c *asynqmw.Collector) float64 {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, _ := reg.Gather()
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "redsem_asynq_requeued_busy_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
