package main

// The adaptive bench (-adaptive, issue 33): a fleet of 4 processes x 8
// goroutines calls a fake upstream whose limits are hidden (C calls at
// once, R a second, a 429 + Retry-After past either) and move mid-run:
// cold start, halved, doubled. Each variant (adaptivevariants.go) runs
// the same phases against a fresh upstream, variants alternating between
// rounds; the upstream samples what it serves every 100 ms and
// adaptivestats.go turns that into the figures.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// The fleet's shape.
const (
	adaptiveProcs      = 4
	adaptiveGoroutines = 8
	adaptiveRetryAfter = 1 // seconds, a 429's Retry-After
)

// adaptivePhase is one stretch of the run at one pair of hidden limits.
type adaptivePhase struct {
	Name  string
	Limit int64 // hidden calls at once
	Rate  int64 // hidden calls a second
	Dur   time.Duration
	Up    bool // the figure is the time to >= 90% of the new limits (else: to within 10%)
}

// adaptiveOptions size the adaptive run.
type adaptiveOptions struct {
	Rounds   int
	Phases   []time.Duration // cold start, halved, doubled
	Latency  [2]time.Duration
	Variants []string // empty: every variant that is built
	Dump     string   // a directory for each run's series as CSV ("": none)
	// Headers: the upstream advertises its rate (advertisingAPI): "ms"
	// with its reset in ms, "s" in whole seconds (the IETF draft's);
	// "": it does not.
	Headers string
}

func (o adaptiveOptions) phases() []adaptivePhase {
	return []adaptivePhase{
		{Name: "cold start", Limit: 10, Rate: 50, Dur: o.Phases[0], Up: true},
		{Name: "halved", Limit: 5, Rate: 25, Dur: o.Phases[1]},
		{Name: "doubled", Limit: 20, Rate: 100, Dur: o.Phases[2], Up: true},
	}
}

// meanLatency is the upstream's mean call time.
func (o adaptiveOptions) meanLatency() time.Duration { return (o.Latency[0] + o.Latency[1]) / 2 }

// hiddenAPI is the fake upstream: C at once and R a second (a token
// bucket of R/10 = 100 ms worth, so that the jitter of a client paced
// exactly at R is not punished), a 429 with Retry-After past either.
type hiddenAPI struct {
	mu       sync.Mutex
	limit    int64
	rate     float64
	tokens   float64
	last     time.Time
	inFlight int64
	arrived  int64
	accepted int64
	rejected int64
	lat      [2]time.Duration
	// headers: the rate is a quota per fixed window of a second, which
	// every answer advertises (advertise); "": a token bucket, hidden.
	headers    string
	win        int64 // the window's second since the Unix epoch
	used       int64 // calls of the rate's quota used in it
	rejectedAt int64 // refused at once (calls in flight), of rejected
}

func (a *hiddenAPI) burst() float64 { return max(1, a.rate/10) }

// set moves the hidden limits; a lower rate keeps no more than its burst.
func (a *hiddenAPI) set(limit, rate int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refill(time.Now())
	a.limit, a.rate = limit, float64(rate)
	a.tokens = min(a.tokens, a.burst())
}

func (a *hiddenAPI) refill(now time.Time) {
	if !a.last.IsZero() {
		a.tokens = min(a.burst(), a.tokens+now.Sub(a.last).Seconds()*a.rate)
	}
	a.last = now
}

// admit counts an arrival and says whether it is served.
func (a *hiddenAPI) admit() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.arrived++
	now := time.Now()
	a.refill(now)
	if s := now.Unix(); s != a.win {
		a.win, a.used = s, 0
	}
	if a.inFlight >= a.limit {
		a.rejected++
		a.rejectedAt++
		return false
	}
	if (a.headers == "" && a.tokens < 1) || (a.headers != "" && float64(a.used) >= a.rate) {
		a.rejected++
		return false
	}
	a.tokens--
	a.used++
	a.inFlight++
	a.accepted++
	return true
}

// advertise writes the rate's quota on an answer, as the IETF draft's
// RateLimit-Policy and combined RateLimit fields: the quota a window,
// what is left of it, and the seconds to its end (in ms, or whole
// seconds rounded up).
func (a *hiddenAPI) advertise(h http.Header) {
	now := time.Now()
	a.mu.Lock()
	quota, left := int64(a.rate), int64(a.rate)
	if a.win == now.Unix() {
		left = max(quota-a.used, 0)
	}
	a.mu.Unlock()
	reset := time.Unix(now.Unix()+1, 0).Sub(now)
	rs := fmt.Sprintf("%.3f", reset.Seconds())
	if a.headers == "s" {
		rs = strconv.Itoa(int(math.Ceil(reset.Seconds())))
	}
	h.Set("RateLimit-Policy", fmt.Sprintf("%d;w=1", quota))
	h.Set("RateLimit", fmt.Sprintf("limit=%d, remaining=%d, reset=%s", quota, left, rs))
}

func (a *hiddenAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ok := a.admit()
	if a.headers != "" {
		a.advertise(w.Header())
	}
	if !ok {
		w.Header().Set("Retry-After", strconv.Itoa(adaptiveRetryAfter))
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	sleepCtx(r.Context(), a.lat[0]+rand.N(a.lat[1]-a.lat[0]+1))
	a.mu.Lock()
	a.inFlight--
	a.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// apiSample is the upstream at one moment: in flight now, counts since
// the start, and the hidden limits.
type apiSample struct {
	At                          time.Duration // since "go"
	InFlight                    int64
	Arrived, Accepted, Rejected int64
	Limit                       int64
	Rate                        int64
}

func (a *hiddenAPI) sample(at time.Duration) apiSample {
	a.mu.Lock()
	defer a.mu.Unlock()
	return apiSample{At: at, InFlight: a.inFlight, Arrived: a.arrived, Accepted: a.accepted,
		Rejected: a.rejected, Limit: a.limit, Rate: int64(a.rate)}
}

// adaptiveRun is what one run of one variant saw.
type adaptiveRun struct {
	Variant string
	Round   int
	Phases  []adaptivePhase
	Samples []apiSample
	Learned [][]learnedSample // per process
	Reports []adaptiveReport
	Redis   redisCounters // deltas over the run
	Load    [2]float64
}

// runAdaptive runs one variant through every phase.
func runAdaptive(ctx context.Context, rdb *redis.Client, addr, variant string, round int, o adaptiveOptions) (run adaptiveRun, err error) {
	run = adaptiveRun{Variant: variant, Round: round, Phases: o.phases(), Load: [2]float64{loadAvg(), 0}}
	first := run.Phases[0]
	api := &hiddenAPI{limit: first.Limit, rate: float64(first.Rate), lat: o.Latency, headers: o.Headers}
	api.tokens = api.burst()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return run, err
	}
	web := &http.Server{Handler: api, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = web.Serve(ln) }()
	defer web.Close()

	v, _ := adaptiveVariantNamed(variant)
	name := fmt.Sprintf("adaptive-bench-r%d-%s", round, strings.ReplaceAll(variant, " ", "-"))
	setOracle := func(adaptivePhase) error { return nil }
	if v.Oracle {
		var closeOracle func()
		if setOracle, closeOracle, err = oracleSetter(ctx, rdb, name); err != nil {
			return run, err
		}
		defer closeOracle()
		if err := setOracle(first); err != nil {
			return run, err
		}
	}
	ws, err := startAdaptiveWorkers(adaptiveWorkerConfig{Procs: adaptiveProcs, Goroutines: adaptiveGoroutines,
		Variant: variant, RedisAddr: addr, API: "http://" + ln.Addr().String(), Name: name,
		Limit: first.Limit, Rate: first.Rate})
	defer stopWorkers(ws, &err)
	if err != nil {
		return run, err
	}
	before, err := readCounters(ctx, rdb)
	if err != nil {
		return run, err
	}
	t0 := time.Now()
	for i, w := range ws {
		if _, err := io.WriteString(w.stdin, "go\n"); err != nil {
			return run, fmt.Errorf("worker %d: %w", i, err)
		}
	}
	sampled := sampleAPI(api, t0)
	if err := playPhases(ctx, api, run.Phases, setOracle); err != nil {
		return run, err
	}
	run.Samples = sampled()
	if o.Headers != "" {
		api.mu.Lock()
		fmt.Fprintf(os.Stderr, "  %s: 429s %d (%d for calls at once, %d for the rate)\n", variant, api.rejected,
			api.rejectedAt, api.rejected-api.rejectedAt)
		api.mu.Unlock()
	}
	after, err := readCounters(ctx, rdb)
	if err != nil {
		return run, err
	}
	run.Redis = after.sub(before)
	if run.Reports, err = collectReports(ws); err != nil {
		return run, err
	}
	for _, rep := range run.Reports {
		run.Learned = append(run.Learned, rep.Learned)
	}
	run.Load[1] = loadAvg()
	return run, nil
}

// oracleSetter stores a phase's hidden limits as the fleet-wide limit and
// rate of the run's name, as an operator who knew them would.
func oracleSetter(ctx context.Context, rdb *redis.Client, prefix string) (set func(adaptivePhase) error, closeFn func(), err error) {
	lc, err := limiter.New(rdb)
	if err != nil {
		return nil, nil, err
	}
	in := inspect.New(lc)
	name := adaptiveName(prefix)
	set = func(ph adaptivePhase) error {
		if err := in.SetLimit(ctx, name, ph.Limit); err != nil {
			return err
		}
		return in.SetRate(ctx, name, limiter.Rate{Events: ph.Rate, Per: time.Second, Burst: 1})
	}
	return set, func() { _ = lc.Close(context.Background()) }, nil
}

// playPhases moves the hidden limits (the oracle's first) at each
// phase's start and waits out its length.
func playPhases(ctx context.Context, api *hiddenAPI, phases []adaptivePhase, setOracle func(adaptivePhase) error) error {
	for i, ph := range phases {
		if i > 0 {
			if err := setOracle(ph); err != nil {
				return fmt.Errorf("oracle: %w", err)
			}
			api.set(ph.Limit, ph.Rate)
		}
		fmt.Fprintf(os.Stderr, "  phase %s: %d at once, %d/s for %v\n", ph.Name, ph.Limit, ph.Rate, ph.Dur)
		if !sleepCtx(ctx, ph.Dur) {
			return ctx.Err()
		}
	}
	return nil
}

// sampleAPI samples api every 100 ms from t0 until the returned func is
// called, which returns the samples.
func sampleAPI(api *hiddenAPI, t0 time.Time) func() []apiSample {
	var out []apiSample
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		out = append(out, api.sample(0))
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				out = append(out, api.sample(now.Sub(t0)))
			}
		}
	}()
	return func() []apiSample { close(done); <-stopped; return out }
}

func startAdaptiveWorkers(cfg adaptiveWorkerConfig) ([]*fleetWorker, error) {
	ws := make([]*fleetWorker, cfg.Procs)
	for i := range ws {
		c := cfg
		c.Proc = i
		w, err := startChild(adaptiveEnv, c)
		if err != nil {
			return ws[:i], err
		}
		ws[i] = w
	}
	for i, w := range ws {
		l, err := w.line(60 * time.Second)
		if err == nil && l != "ready" {
			err = fmt.Errorf("expected ready, got %q; stderr: %s", l, w.stderr.String())
		}
		if err != nil {
			return ws, fmt.Errorf("worker %d: %w", i, err)
		}
	}
	return ws, nil
}

// collectReports stops the workers and reads their reports.
func collectReports(ws []*fleetWorker) ([]adaptiveReport, error) {
	for i, w := range ws {
		if _, err := io.WriteString(w.stdin, "stop\n"); err != nil {
			return nil, fmt.Errorf("worker %d: %w", i, err)
		}
	}
	var reps []adaptiveReport
	for i, w := range ws {
		l, err := w.line(40 * time.Second)
		if err != nil {
			return nil, fmt.Errorf("worker %d report: %w", i, err)
		}
		var rep adaptiveReport
		if err := json.Unmarshal([]byte(l), &rep); err != nil {
			return nil, fmt.Errorf("worker %d report %q: %w", i, l, err)
		}
		if rep.Err != "" {
			return nil, fmt.Errorf("worker %d: %s", i, rep.Err)
		}
		reps = append(reps, rep)
	}
	return reps, nil
}

// stopWorkers ends the workers: closed stdin stops them; after an error
// they are killed.
func stopWorkers(ws []*fleetWorker, err *error) {
	for _, w := range ws {
		if w == nil {
			continue
		}
		_ = w.stdin.Close()
		if *err != nil {
			_ = w.cmd.Process.Kill()
		}
		_ = w.cmd.Wait()
	}
}

// runAdaptiveTables runs every variant rounds times, alternating the
// order, on one redis-server, and prints the table.
func runAdaptiveTables(ctx context.Context, out io.Writer, o adaptiveOptions) error {
	srv, err := startRedis()
	if err != nil {
		return err
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	vs := adaptiveRunnable(o.Variants)
	printAdaptiveHeader(out, o, vs)
	var runs []adaptiveRun
	for round := range o.Rounds {
		for k := range vs {
			v := vs[(k+round)%len(vs)]
			fmt.Fprintf(os.Stderr, "adaptive: %s, round %d\n", v, round+1)
			r, err := runAdaptive(ctx, rdb, srv.Addr, v, round+1, o)
			if err != nil {
				return fmt.Errorf("adaptive %s, round %d: %w", v, round+1, err)
			}
			runs = append(runs, r)
		}
	}
	printAdaptive(out, runs, o)
	if o.Dump != "" {
		return dumpAdaptive(o.Dump, runs)
	}
	return nil
}

// adaptiveRunnable is the variants asked for that are built.
func adaptiveRunnable(asked []string) []string {
	var vs []string
	for _, v := range adaptiveVariants {
		if v.New != nil && (len(asked) == 0 || sliceHas(asked, v.Name)) {
			vs = append(vs, v.Name)
		}
	}
	return vs
}

func sliceHas(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

func printAdaptiveHeader(out io.Writer, o adaptiveOptions, vs []string) {
	total := time.Duration(0)
	for _, ph := range o.phases() {
		total += ph.Dur
	}
	fmt.Fprintf(out, "## adaptive: %d processes x %d goroutines against hidden limits (429 + Retry-After %ds), calls %v-%v\n\n",
		adaptiveProcs, adaptiveGoroutines, adaptiveRetryAfter, o.Latency[0], o.Latency[1])
	if o.Headers != "" {
		fmt.Fprintf(out, "The upstream advertises its rate (RateLimit-Policy: R;w=1, RateLimit: limit, remaining, reset in %s), a quota per fixed window of a second; the calls at once stay hidden.\n\n",
			map[string]string{"ms": "ms", "s": "whole seconds"}[o.Headers])
	}
	fmt.Fprintf(out, "Go %s, GOMAXPROCS %d, NumCPU %d, %s; %d round(s) of %v per variant, load %.1f\n\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), time.Now().Format("2006-01-02 15:04"),
		o.Rounds, total, loadAvg())
	for _, ph := range o.phases() {
		fmt.Fprintf(out, "- %s: %d at once, %d/s, %v\n", ph.Name, ph.Limit, ph.Rate, ph.Dur)
	}
	fmt.Fprintln(out)
	for _, v := range adaptiveVariants {
		state := "ran"
		if !sliceHas(vs, v.Name) {
			state = "not run"
		}
		fmt.Fprintf(out, "- **%s** (%s): %s\n", v.Name, state, v.Config)
	}
	fmt.Fprintln(out)
}
