// Command worker is the demo of redsem's asynq middleware: a fleet of asynq
// servers (several in one process, standing in for many hosts) works
// through a batch of tasks that each call a fake third-party API for one
// of a few customers. The API allows 5 calls in flight and 20 calls in
// any second, and answers 429 past either. Two rules gate every task: at
// most 2 calls per customer, and, across the whole fleet, at most 5 calls
// in flight and 18 starts a second (a tenth under the API's rate, for
// network jitter). A 429 would pause the rule for every worker
// (asynqmw.Pause); the report shows there is none.
//
//	go run ./examples/worker                    # embedded Redis (miniredis)
//	go run ./examples/worker -redis localhost:6379
//	go run ./examples/worker -serve             # keep /metrics up after the report
//
// It prints progress (a line per second when the output is not a
// terminal), then a report with the API's observed peaks and 429s, and
// exits.
// Prometheus metrics are served on -metrics while it runs.
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
	"os/signal"
	"strings"
	"sync"
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

type config struct {
	addr        string // Redis; "" for an embedded miniredis
	servers     int
	concurrency int
	tasks       int
	limit       int64 // fleet-wide
	rate        int64 // calls a second the API allows, fleet-wide
	perCustomer int64
	customers   int
	metrics     string // where to serve /metrics
	serve       bool   // keep serving /metrics after the report, until interrupted
}

func main() {
	var c config
	flag.StringVar(&c.addr, "redis", os.Getenv("REDIS_ADDR"), "Redis address (default: an embedded miniredis)")
	flag.IntVar(&c.servers, "servers", 4, "asynq servers (stand-ins for worker hosts)")
	flag.IntVar(&c.concurrency, "concurrency", 5, "handlers per server")
	flag.IntVar(&c.tasks, "tasks", 120, "tasks to run")
	flag.Int64Var(&c.limit, "limit", 5, "calls the partner API allows at once, fleet-wide")
	flag.Int64Var(&c.rate, "rate", 20, "calls the partner API allows in any second, fleet-wide")
	flag.Int64Var(&c.perCustomer, "per-customer", 2, "calls at once per customer")
	flag.IntVar(&c.customers, "customers", 4, "customers the tasks are for")
	flag.StringVar(&c.metrics, "metrics", "127.0.0.1:0", "where to serve /metrics")
	flag.BoolVar(&c.serve, "serve", false, "keep serving /metrics after the report, until Ctrl-C")
	flag.Parse()
	if err := run(c, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// errTooMany is the API's 429.
var errTooMany = errors.New("partner API: 429 Too Many Requests")

// fakeAPI is the third-party service: it allows limit calls in flight and
// rate calls in any second, and answers 429 (errTooMany) past either. It
// counts calls in flight, overall and per customer, and calls in the last
// second, and remembers the peaks, which are the numbers the caps must
// keep at or below their limits.
type fakeAPI struct {
	limit, rate int64
	inFlight    peakCounter
	mu          sync.Mutex
	perCustomer map[string]*peakCounter
	lastSecond  []time.Time // starts of the calls let in during the last second
	ratePeak    int
	tooMany     atomic.Int64 // 429s answered
}

func newFakeAPI(limit, rate int64) *fakeAPI {
	return &fakeAPI{limit: limit, rate: rate, perCustomer: map[string]*peakCounter{}}
}

// admit counts a call against the rate, or refuses it (429) when the
// last second holds rate calls already.
func (a *fakeAPI) admit(now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for len(a.lastSecond) > 0 && now.Sub(a.lastSecond[0]) >= time.Second {
		a.lastSecond = a.lastSecond[1:]
	}
	if int64(len(a.lastSecond)) >= a.rate {
		return false
	}
	a.lastSecond = append(a.lastSecond, now)
	a.ratePeak = max(a.ratePeak, len(a.lastSecond))
	return true
}

// peakPerSecond is the most calls let in within one second.
func (a *fakeAPI) peakPerSecond() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ratePeak
}

// peakCounter counts calls in flight and keeps the most there were.
type peakCounter struct{ now, peak atomic.Int64 }

// enter counts a call in and returns how many are in flight with it.
func (p *peakCounter) enter() int64 {
	n := p.now.Add(1)
	for q := p.peak.Load(); n > q && !p.peak.CompareAndSwap(q, n); q = p.peak.Load() {
	}
	return n
}

func (p *peakCounter) leave() { p.now.Add(-1) }

func (a *fakeAPI) customer(name string) *peakCounter {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.perCustomer[name] == nil {
		a.perCustomer[name] = &peakCounter{}
	}
	return a.perCustomer[name]
}

// customerPeak is the highest per-customer peak.
func (a *fakeAPI) customerPeak() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var m int64
	for _, c := range a.perCustomer {
		m = max(m, c.peak.Load())
	}
	return m
}

// call is one call for customer: a 429 (errTooMany) when it is over the
// API's limit or rate, else 150-350ms of work.
func (a *fakeAPI) call(ctx context.Context, customer string) error {
	c := a.customer(customer)
	defer a.inFlight.leave()
	if a.inFlight.enter() > a.limit || !a.admit(time.Now()) {
		a.tooMany.Add(1)
		return errTooMany
	}
	c.enter()
	defer c.leave()
	select {
	case <-time.After(time.Duration(150+rand.IntN(200)) * time.Millisecond):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// customerOf is the Key of the per-customer rule: the task's payload is
// the customer's name.
func customerOf(_ context.Context, t *asynq.Task) (string, bool) {
	return string(t.Payload()), len(t.Payload()) > 0
}

func run(c config, out *os.File) (err error) {
	where := c.addr
	if c.addr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close() // last: after everything that talks to it
		c.addr, where = mr.Addr(), "embedded miniredis at "+mr.Addr()
	}
	// One go-redis client for the process: the limiter Client and every
	// asynq server and client share it.
	rdb := redis.NewClient(&redis.Options{Addr: c.addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", c.addr, err)
	}
	// One limiter Client per process, closed after the asynq servers shut
	// down (below) and before rdb.
	lc, err := limiter.New(rdb)
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if cerr := lc.Close(ctx); cerr != nil && err == nil {
			err = cerr
		}
	}()

	reg := prometheus.NewRegistry()
	metrics := asynqmw.NewCollector()
	reg.MustRegister(metrics)
	ln, err := net.Listen("tcp", c.metrics)
	if err != nil {
		return err
	}
	web := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go web.Serve(ln)
	defer web.Close()

	// Every matching rule applies, in this order: a task first gets its
	// customer's permit, then one of the fleet-wide ones, then a near
	// slot of the fleet-wide rate, so that a customer's backlog waits
	// without sitting on fleet-wide permits. With Park, a task whose
	// customer is at its cap while the fleet has room leaves its handler
	// to other customers' tasks and comes back at its customer's next
	// release. The rate is a tenth under the API's: a call reaches the
	// API a little after its slot, by a varying delay (network,
	// scheduling).
	rate := limiter.Rate{Events: max(c.rate-c.rate/10, 1), Per: time.Second, Burst: 1}
	mw, err := asynqmw.New(lc, []asynqmw.Rule{
		{Name: "partner-api-customer", TypePrefix: "partner:", Key: customerOf, Limit: c.perCustomer},
		{Name: "partner-api", TypePrefix: "partner:", Limit: c.limit, Rate: rate},
	}, asynqmw.Park(rdb), asynqmw.Metrics(metrics), asynqmw.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	api := newFakeAPI(c.limit, c.rate)
	var done atomic.Int64
	mux := asynq.NewServeMux()
	mux.Use(mw)
	mux.HandleFunc("partner:sync", func(ctx context.Context, t *asynq.Task) error {
		err := api.call(ctx, string(t.Payload()))
		if errors.Is(err, errTooMany) {
			// Every worker holds off the partner's rule for a second
			// (not the per-customer one: the partner said too many);
			// this task comes back then, without spending a retry.
			return &asynqmw.PauseError{For: time.Second, Rule: "partner-api", Err: err}
		}
		if err != nil {
			return err
		}
		done.Add(1)
		return nil
	})

	var srvs []*asynq.Server
	defer func() { // all at once, not one after another
		var wg sync.WaitGroup
		for _, s := range srvs {
			wg.Add(1)
			go func() { defer wg.Done(); s.Shutdown() }()
		}
		wg.Wait()
	}()
	for range c.servers {
		srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
			Concurrency:              c.concurrency,
			IsFailure:                asynqmw.IsFailure(nil),
			RetryDelayFunc:           asynqmw.RetryDelay(nil),
			DelayedTaskCheckInterval: 200 * time.Millisecond,
			TaskCheckInterval:        100 * time.Millisecond,
			LogLevel:                 asynq.FatalLevel,
		})
		if err := srv.Start(mux); err != nil {
			return err
		}
		srvs = append(srvs, srv)
	}

	fmt.Fprintf(out, "redsem worker demo: %d asynq servers × %d handlers on %s\n", c.servers, c.concurrency, where)
	fmt.Fprintf(out, "%d tasks for %d customers call a partner API that allows %d calls at once and %d a second (429 past either)\n",
		c.tasks, c.customers, c.limit, c.rate)
	fmt.Fprintf(out, "rules: at most %d calls at once per customer; %d at once and %v in all\n", c.perCustomer, c.limit, rate)
	fmt.Fprintf(out, "metrics on http://%s/metrics\n\n", ln.Addr())
	client := asynq.NewClientFromRedisClient(rdb)
	defer client.Close()
	start := time.Now()
	for i := range c.tasks {
		customer := fmt.Sprintf("customer-%d", i%c.customers)
		if _, err := client.Enqueue(asynq.NewTask("partner:sync", []byte(customer)), asynq.MaxRetry(5)); err != nil {
			return err
		}
	}

	tty := isTerminal(out)
	every := time.Second
	if tty {
		every = 250 * time.Millisecond
	}
	progress := func() string {
		return fmt.Sprintf("%5.1fs  done %3d/%d  in flight %d  peak %d/%d (per customer %d/%d)  calls/s peak %d/%d  429s %d  busy re-queues %.0f",
			time.Since(start).Seconds(), done.Load(), c.tasks, api.inFlight.now.Load(), api.inFlight.peak.Load(), c.limit,
			api.customerPeak(), c.perCustomer, api.peakPerSecond(), c.rate, api.tooMany.Load(), metrics.Count("", asynqmw.SeriesRequeued))
	}
	poll := time.NewTicker(20 * time.Millisecond) // to see the end at once
	defer poll.Stop()
	deadline := time.After(3 * time.Minute)
	for printed := start; done.Load() < int64(c.tasks); {
		select {
		case now := <-poll.C:
			if now.Sub(printed) < every {
				continue
			}
			printed = now
			if tty {
				fmt.Fprintf(out, "\r%s   ", progress())
			} else {
				fmt.Fprintln(out, progress())
			}
		case <-deadline:
			return errors.New("gave up after 3 minutes")
		}
	}
	wall := time.Since(start)
	if tty {
		fmt.Fprintf(out, "\r%s\n", strings.Repeat(" ", len(progress())+3))
	}
	fmt.Fprintf(out, "\nreport\n  tasks done              %d\n  API peak in flight      %d (limit %d)\n  API peak calls in 1s    %d (rate %d/s)\n  API 429s                %d\n  peak for one customer   %d (limit %d)\n  rate waits              %.0f\n  busy re-queues          %.0f\n  wall time               %v\n",
		done.Load(), api.inFlight.peak.Load(), c.limit, api.peakPerSecond(), c.rate, api.tooMany.Load(), api.customerPeak(), c.perCustomer,
		metrics.Count("", asynqmw.SeriesRateWaits), metrics.Count("", asynqmw.SeriesRequeued), wall.Round(time.Millisecond))
	if p := api.inFlight.peak.Load(); p > c.limit {
		return fmt.Errorf("the API saw %d calls at once, over the limit %d", p, c.limit)
	}
	if n := api.tooMany.Load(); n > 0 {
		return fmt.Errorf("the API answered 429 %d times", n)
	}
	if p := api.customerPeak(); p > c.perCustomer {
		return fmt.Errorf("a customer had %d calls at once, over the limit %d", p, c.perCustomer)
	}
	if c.serve {
		fmt.Fprintf(out, "\nserving http://%s/metrics until Ctrl-C\n", ln.Addr())
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		<-ctx.Done()
	}
	return nil
}

// isTerminal reports whether f is a terminal (a character device), where
// progress can redraw one line.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
