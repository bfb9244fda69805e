package main

// The fleet benchmark (-fleet): 4 asynq worker processes of 5 handlers
// each work through a backlog of tasks that each make one call to a
// fake partner API, which allows 5 calls at once and 20 in any second
// and answers 429 with Retry-After past either. Three ways to keep a
// fleet under such limits are compared: redsem's asynqmw, asynq's x/rate
// semaphore with go-redis/redis_rate, and the asynq wiki's per-process
// x/time/rate recipe (fleetworker.go). The limits' state lives on a
// Redis of its own, which the "fresh" and "restart" scenarios start
// late or restart empty; asynq's queue is on another, which is left
// alone.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// The API's limits, and the fleet's shape.
const (
	apiLimit       = 5  // calls at once
	apiRate        = 20 // calls in any second
	apiRetryAfter  = 1  // seconds, the 429's Retry-After
	fleetProcs     = 4
	fleetHandlers  = 5
	fleetCustomers = 4
	fleetPerCust   = 2
	fleetRate      = 18 // the clients' configured starts a second
	// fleetBurst is the rest of the API's second (guide: "Choose Burst
	// with the rate"): the slots that pass while every permit is in a
	// call are caught up, and Burst + 18 stays within the API's 20.
	fleetBurst      = apiRate - fleetRate
	fleetMeanCall   = 250 * time.Millisecond
	fullSpeedFactor = 0.9
)

// fleetScenario is one situation the fleet runs in.
type fleetScenario struct {
	Name    string
	Skew    bool    // customer A has 70% of the tasks
	Fresh   bool    // the limiter's Redis starts 0.3s before the workers
	Restart bool    // the limiter's Redis restarts empty after a third of the tasks
	Rate    float64 // the clients' configured rate (0: fleetRate)
	Local   bool    // the per-process recipe runs too
}

var fleetScenarios = []fleetScenario{
	{Name: "steady", Local: true},
	{Name: "skewed", Skew: true, Local: true},
	{Name: "fresh", Fresh: true},
	{Name: "restart", Restart: true, Local: true},
	{Name: "pushback", Rate: 30},
}

func (s fleetScenario) rate() float64 {
	if s.Rate > 0 {
		return s.Rate
	}
	return fleetRate
}

// fleetOptions sizes the fleet runs.
type fleetOptions struct {
	Tasks     int
	Rounds    int
	Timeout   time.Duration
	Scenarios []string // empty: all
	Variants  []string // empty: all
}

// apiCall is one request the fake API saw.
type apiCall struct {
	At, End  time.Time
	Customer string
	Task     string
	Enqueued time.Time
	Accepted bool
	Reason   string        // of a 429: "conc" or "rate"
	Done     bool          // answered 200 (not cut short by the client)
	InsideRA bool          // arrived inside a Retry-After already announced
	RAAge    time.Duration // InsideRA: how long after the 429 that announced it
	Sent     int           // calls in flight with this one, itself included
}

// fleetAPI is the fake partner API.
type fleetAPI struct {
	mu       sync.Mutex
	inFlight int
	window   []time.Time // accepted starts of the last second
	raUntil  time.Time   // end of the latest Retry-After announced
	calls    []apiCall
	done     map[string]bool
	nDone    atomic.Int64
}

func newFleetAPI() *fleetAPI { return &fleetAPI{done: map[string]bool{}} }

func (a *fleetAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	q := r.URL.Query()
	enq, _ := strconv.ParseInt(q.Get("e"), 10, 64)
	c := apiCall{At: now, Customer: q.Get("c"), Task: q.Get("t"), Enqueued: time.Unix(0, enq)}
	a.mu.Lock()
	c.InsideRA = now.Before(a.raUntil)
	if c.InsideRA {
		c.RAAge = now.Sub(a.raUntil.Add(-apiRetryAfter * time.Second))
	}
	c.Sent = a.inFlight + 1
	for len(a.window) > 0 && now.Sub(a.window[0]) >= time.Second {
		a.window = a.window[1:]
	}
	switch {
	case a.inFlight >= apiLimit:
		c.Reason = "conc"
	case len(a.window) >= apiRate:
		c.Reason = "rate"
	}
	if c.Reason != "" {
		if until := now.Add(apiRetryAfter * time.Second); until.After(a.raUntil) {
			a.raUntil = until
		}
		a.calls = append(a.calls, c)
		a.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(apiRetryAfter))
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	c.Accepted = true
	a.inFlight++
	a.window = append(a.window, now)
	i := len(a.calls)
	a.calls = append(a.calls, c)
	a.mu.Unlock()

	ok := false
	select {
	case <-time.After(time.Duration(150+rand.IntN(201)) * time.Millisecond):
		ok = true
	case <-r.Context().Done():
	}
	a.mu.Lock()
	a.inFlight--
	a.calls[i].End = time.Now()
	a.calls[i].Done = ok
	if ok && !a.done[c.Task] {
		a.done[c.Task] = true
		a.nDone.Add(1)
	}
	a.mu.Unlock()
	if ok {
		w.WriteHeader(http.StatusOK)
	}
}

func (a *fleetAPI) snapshot() []apiCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

// redisCounters are a server's total_commands_processed and used CPU.
type redisCounters struct{ Cmds, CPUUsec int64 }

func (c redisCounters) sub(d redisCounters) redisCounters {
	return redisCounters{c.Cmds - d.Cmds, c.CPUUsec - d.CPUUsec}
}

func (c redisCounters) add(d redisCounters) redisCounters {
	return redisCounters{c.Cmds + d.Cmds, c.CPUUsec + d.CPUUsec}
}

func readCounters(ctx context.Context, rdb *redis.Client) (redisCounters, error) {
	info, err := rdb.Info(ctx, "stats", "cpu").Result()
	if err != nil {
		return redisCounters{}, err
	}
	var c redisCounters
	c.Cmds, err = strconv.ParseInt(infoField(info, "total_commands_processed"), 10, 64)
	if err != nil {
		return c, fmt.Errorf("INFO total_commands_processed: %w", err)
	}
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, err := strconv.ParseFloat(infoField(info, f), 64)
		if err != nil {
			return c, fmt.Errorf("INFO %s: %w", f, err)
		}
		c.CPUUsec += int64(v * 1e6)
	}
	return c, nil
}

// fleetRun is what one run of one variant in one scenario saw.
type fleetRun struct {
	Scenario  fleetScenario
	Variant   string
	Round     int
	N         int
	T0        time.Time // "go"
	End       time.Time // all done, or the timeout
	RestartAt time.Time // the limiter's Redis shut down (restart)
	TimedOut  bool
	Calls     []apiCall
	Reports   []fleetReport
	Limiter   redisCounters // deltas over the run
	Asynq     redisCounters
	// CmdStats: the limiter Redis' INFO commandstats calls over the run
	// (not across a restart).
	CmdStats map[string]int64
	Load     [2]float64 // 1-minute load average before, after
}

// fleetWorker is a worker process, seen from the parent.
type fleetWorker struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *lockedBuffer
	lines  chan string
}

func startFleetWorker(cfg fleetWorkerConfig) (*fleetWorker, error) {
	return startChild(fleetEnv, cfg)
}

// startChild starts this binary again in the role that env names, with
// cfg as JSON in it, talking lines on stdin and stdout (the fleet's and
// the adaptive bench's workers).
func startChild(env string, cfg any) (*fleetWorker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env+"="+string(js))
	cmd.SysProcAttr = sysProcAttr()
	w := &fleetWorker{cmd: cmd, stderr: &lockedBuffer{}, lines: make(chan string, 4)}
	cmd.Stderr = w.stderr
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(w.lines)
		br := bufio.NewReader(stdout)
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				w.lines <- strings.TrimSpace(line)
			}
			if err != nil {
				return
			}
		}
	}()
	return w, nil
}

func (w *fleetWorker) line(timeout time.Duration) (string, error) {
	select {
	case l, ok := <-w.lines:
		if !ok {
			return "", fmt.Errorf("worker exited; stderr: %s", strings.TrimSpace(w.stderr.String()))
		}
		return l, nil
	case <-time.After(timeout):
		return "", fmt.Errorf("no answer within %v; stderr: %s", timeout, strings.TrimSpace(w.stderr.String()))
	}
}

func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return math.NaN()
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return f
}

// runFleet runs one variant in one scenario.
func runFleet(ctx context.Context, sc fleetScenario, variant string, round int, o fleetOptions) (run fleetRun, err error) {
	run = fleetRun{Scenario: sc, Variant: variant, Round: round, N: o.Tasks}
	run.Load[0] = loadAvg()
	bin, err := redisBin()
	if err != nil {
		return run, err
	}
	asy, err := launchRedis(bin)
	if err != nil {
		return run, err
	}
	defer asy.Stop()
	asyRDB := redis.NewClient(&redis.Options{Addr: asy.Addr})
	defer asyRDB.Close()

	limPort, err := freePort()
	if err != nil {
		return run, err
	}
	limAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(limPort))
	var lim *redisServer
	defer func() { lim.Stop() }()
	var limStarted time.Time
	if !sc.Fresh {
		if lim, err = launchRedisPort(bin, limPort); err != nil {
			return run, err
		}
		limStarted = time.Now()
	}
	limRDB := redis.NewClient(&redis.Options{Addr: limAddr, MaxRetries: -1})
	defer limRDB.Close()

	api := newFleetAPI()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return run, err
	}
	web := &http.Server{Handler: api, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = web.Serve(ln) }()
	defer web.Close()

	ws := make([]*fleetWorker, fleetProcs)
	defer func() {
		for _, w := range ws {
			if w == nil {
				continue
			}
			_ = w.stdin.Close()
			if err != nil {
				_ = w.cmd.Process.Kill()
			}
			_ = w.cmd.Wait()
		}
	}()
	for i := range ws {
		cfg := fleetWorkerConfig{Proc: i, Procs: fleetProcs, Variant: variant, AsynqAddr: asy.Addr, LimiterAddr: limAddr,
			API: "http://" + ln.Addr().String(), Concurrency: fleetHandlers, Limit: apiLimit, PerCustomer: fleetPerCust, Rate: sc.rate(), Burst: fleetBurst}
		if ws[i], err = startFleetWorker(cfg); err != nil {
			return run, err
		}
	}
	for i, w := range ws {
		l, err := w.line(60 * time.Second)
		if err == nil && l != "ready" {
			err = fmt.Errorf("expected ready, got %q; stderr: %s", l, w.stderr.String())
		}
		if err != nil {
			return run, fmt.Errorf("worker %d: %w", i, err)
		}
	}
	if sc.Fresh {
		if lim, err = launchRedisPort(bin, limPort); err != nil {
			return run, err
		}
		time.Sleep(300 * time.Millisecond)
	} else {
		// A steady fleet's Redis has been up for long: older than
		// redsem's restart quarantine (3s; before the asynqmw redesign
		// limiter.DefaultTTL, 10s), with some slack.
		time.Sleep(time.Until(limStarted.Add(12 * time.Second)))
	}

	// The backlog, enqueued up front.
	client := asynq.NewClientFromRedisClient(asyRDB)
	customers := fleetCustomerList(o.Tasks, sc.Skew)
	for i, c := range customers {
		p, _ := json.Marshal(fleetPayload{Customer: c, Enqueued: time.Now().UnixNano(), Index: i})
		if _, err := client.Enqueue(asynq.NewTask(fleetTaskType, p)); err != nil {
			return run, fmt.Errorf("enqueue: %w", err)
		}
	}
	limBefore, err := readCounters(ctx, limRDB)
	if err != nil {
		return run, fmt.Errorf("limiter redis: %w", err)
	}
	statsBefore, err := readCommandstats(ctx, limRDB)
	if err != nil {
		return run, fmt.Errorf("limiter redis: %w", err)
	}
	asyBefore, err := readCounters(ctx, asyRDB)
	if err != nil {
		return run, err
	}
	run.T0 = time.Now()
	for i, w := range ws {
		if _, err := io.WriteString(w.stdin, "go\n"); err != nil {
			return run, fmt.Errorf("worker %d: %w", i, err)
		}
	}
	var limBeforeRestart redisCounters
	restarted := false
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for api.nDone.Load() < int64(o.Tasks) {
		select {
		case <-ctx.Done():
			return run, ctx.Err()
		case <-tick.C:
		}
		if time.Since(run.T0) > o.Timeout {
			run.TimedOut = true
			break
		}
		if sc.Restart && !restarted && api.nDone.Load() >= int64(o.Tasks/3) {
			restarted = true
			c, err := readCounters(ctx, limRDB)
			if err != nil {
				return run, err
			}
			limBeforeRestart = c.sub(limBefore)
			run.RestartAt = time.Now()
			_ = limRDB.ShutdownNoSave(ctx).Err()
			lim.Stop()
			if lim, err = launchRedisPort(bin, limPort); err != nil {
				return run, fmt.Errorf("restart: %w", err)
			}
			limBefore = redisCounters{}
			statsBefore = map[string]int64{}
		}
	}
	run.End = time.Now()
	limAfter, err := readCounters(ctx, limRDB)
	if err != nil {
		return run, err
	}
	asyAfter, err := readCounters(ctx, asyRDB)
	if err != nil {
		return run, err
	}
	run.Limiter = limAfter.sub(limBefore).add(limBeforeRestart)
	statsAfter, err := readCommandstats(ctx, limRDB)
	if err != nil {
		return run, err
	}
	run.CmdStats = map[string]int64{}
	for k, v := range statsAfter {
		if d := v - statsBefore[k]; d > 0 && k != "info" {
			run.CmdStats[k] = d
		}
	}
	run.Asynq = asyAfter.sub(asyBefore)
	for i, w := range ws {
		if _, err := io.WriteString(w.stdin, "stop\n"); err != nil {
			return run, fmt.Errorf("worker %d: %w", i, err)
		}
	}
	for i, w := range ws {
		l, err := w.line(30 * time.Second)
		if err != nil {
			return run, fmt.Errorf("worker %d report: %w", i, err)
		}
		var rep fleetReport
		if err := json.Unmarshal([]byte(l), &rep); err != nil {
			return run, fmt.Errorf("worker %d report %q: %w", i, l, err)
		}
		if rep.Err != "" {
			return run, fmt.Errorf("worker %d: %s", i, rep.Err)
		}
		run.Reports = append(run.Reports, rep)
	}
	for i, w := range ws {
		_ = w.stdin.Close()
		if err := w.cmd.Wait(); err != nil {
			return run, fmt.Errorf("worker %d: %w; stderr: %s", i, err, w.stderr.String())
		}
		ws[i] = nil
	}
	run.Calls = api.snapshot()
	run.Load[1] = loadAvg()
	return run, nil
}

// fleetCustomerList gives each task its customer: round robin, or 70%
// for A and the rest shared by the others, shuffled (a fixed seed).
func fleetCustomerList(n int, skew bool) []string {
	names := []string{"A", "B", "C", "D"}[:fleetCustomers]
	out := make([]string, n)
	if !skew {
		for i := range out {
			out[i] = names[i%len(names)]
		}
		return out
	}
	nA := n * 7 / 10
	for i := range out {
		if i < nA {
			out[i] = names[0]
		} else {
			out[i] = names[1+(i-nA)%(len(names)-1)]
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// fleetStats are one run's figures.
type fleetStats struct {
	Done, Accepted, Wasted int
	Wall                   time.Duration // "go" to the last task done
	Goodput                float64       // done/s ÷ min(R, C/mean call)
	MidRate                float64       // accepted calls/s in the middle 60%
	TooMany, Conc, RateRej int
	InsideRA               int
	InsideAge              time.Duration // the latest such arrival after its 429
	Requeues               float64       // busy re-queues per task
	RequeueKinds           string
	Failed                 int64
	FirstErr               string
	P50, P99               time.Duration
	Jain                   float64
	JainWindow             time.Duration
	Shares                 string
	Gap, GapAt             time.Duration // the longest gap, and where it began (from "go")
	FullSpeed              time.Duration // -1: never
	PeakSent, MaxPer1s     int
	LimSent, LimCmds       float64 // per task done: sent by the workers, run by Redis
	LimCPU                 float64
	AsyCmds                float64
}

func (r fleetRun) stats() fleetStats {
	var s fleetStats
	var acc []apiCall
	first := map[string]apiCall{}
	var arrivals []time.Time
	for _, c := range r.Calls {
		arrivals = append(arrivals, c.At)
		s.PeakSent = max(s.PeakSent, c.Sent)
		if c.InsideRA {
			s.InsideRA++
			s.InsideAge = max(s.InsideAge, c.RAAge)
		}
		if !c.Accepted {
			s.TooMany++
			if c.Reason == "conc" {
				s.Conc++
			} else {
				s.RateRej++
			}
			continue
		}
		acc = append(acc, c)
		if c.Done {
			if f, ok := first[c.Task]; !ok || c.End.Before(f.End) {
				first[c.Task] = c
			}
		}
	}
	s.Done, s.Accepted = len(first), len(acc)
	s.Wasted = s.Accepted - s.Done
	slices.SortFunc(acc, func(a, b apiCall) int { return a.At.Compare(b.At) })
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })

	var lat []time.Duration
	last := r.T0
	for _, c := range first {
		lat = append(lat, c.End.Sub(c.Enqueued))
		if c.End.After(last) {
			last = c.End
		}
	}
	if r.TimedOut {
		last = r.End
	}
	s.Wall = last.Sub(r.T0)
	slices.Sort(lat)
	s.P50, s.P99 = quantile(lat, 0.5), quantile(lat, 0.99)
	bound := math.Min(apiRate, apiLimit/fleetMeanCall.Seconds())
	if s.Wall > 0 {
		s.Goodput = float64(s.Done) / s.Wall.Seconds() / bound
	}
	if len(acc) > 0 {
		span := acc[len(acc)-1].At.Sub(r.T0)
		lo, hi := r.T0.Add(span/5), r.T0.Add(span*4/5)
		n := 0
		for _, c := range acc {
			if !c.At.Before(lo) && c.At.Before(hi) {
				n++
			}
		}
		if span > 0 {
			s.MidRate = float64(n) / (0.6 * span.Seconds())
		}
	}

	var kinds [6]int64
	for _, rep := range r.Reports {
		for i, v := range []int64{rep.Busy, rep.Rate, rep.Parked, rep.Paused, rep.SemaBusy, rep.RateBusy} {
			kinds[i] += v
		}
		s.Failed += rep.Failed
		if s.FirstErr == "" {
			s.FirstErr = rep.FirstErr
		}
	}
	var parts []string
	var total, polls int64
	for _, rep := range r.Reports {
		polls += rep.Polls
	}
	if polls > 0 {
		parts = append(parts, fmt.Sprintf("(polls in handlers %d)", polls))
	}
	for i, name := range []string{"busy", "rate", "parked", "paused", "semaphore", "rate"} {
		total += kinds[i]
		if kinds[i] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", name, kinds[i]))
		}
	}
	s.Requeues = float64(total) / float64(r.N)
	s.RequeueKinds = strings.Join(parts, ", ")

	// Fairness while every customer has work: up to the first customer's
	// last accepted call (the run's end for one not done).
	want := map[string]int{}
	for _, c := range fleetCustomerList(r.N, r.Scenario.Skew) {
		want[c]++
	}
	got := map[string]int{}
	lastOf := map[string]time.Time{}
	for _, c := range acc {
		if c.Done && first[c.Task].At.Equal(c.At) {
			got[c.Customer]++
			if got[c.Customer] == want[c.Customer] {
				lastOf[c.Customer] = c.At
			}
		}
	}
	wEnd := r.End
	for c := range want {
		if t, ok := lastOf[c]; ok && t.Before(wEnd) {
			wEnd = t
		}
	}
	s.JainWindow = wEnd.Sub(r.T0)
	var sum, sq float64
	var shares []string
	for _, c := range slices.Sorted(mapsKeys(want)) {
		n := 0
		for _, a := range acc {
			if a.Customer == c && a.At.Before(wEnd) {
				n++
			}
		}
		x := float64(n) / s.JainWindow.Seconds()
		sum += x
		sq += x * x
		shares = append(shares, fmt.Sprintf("%s %.1f", c, x))
	}
	if sq > 0 {
		s.Jain = sum * sum / (float64(len(want)) * sq)
	}
	s.Shares = strings.Join(shares, " ")

	prev := r.T0
	for _, c := range acc {
		if g := c.At.Sub(prev); g > s.Gap {
			s.Gap, s.GapAt = g, prev.Sub(r.T0)
		}
		prev = c.At
	}
	ref := r.T0
	if !r.RestartAt.IsZero() {
		ref = r.RestartAt
	}
	s.FullSpeed = -1
	need := int(math.Ceil(fullSpeedFactor * fleetRate))
	for i, c := range acc {
		if c.At.Before(ref) {
			continue
		}
		j := i
		for j < len(acc) && acc[j].At.Sub(c.At) < time.Second {
			j++
		}
		if j-i >= need {
			s.FullSpeed = c.At.Sub(ref)
			break
		}
	}
	for i, j := 0, 0; i < len(arrivals); i++ {
		for arrivals[i].Sub(arrivals[j]) >= time.Second {
			j++
		}
		s.MaxPer1s = max(s.MaxPer1s, i-j+1)
	}
	if s.Done > 0 {
		var sent int64
		for _, rep := range r.Reports {
			sent += rep.Sent
		}
		s.LimSent = float64(sent) / float64(s.Done)
		s.LimCmds = float64(r.Limiter.Cmds) / float64(s.Done)
		s.LimCPU = float64(r.Limiter.CPUUsec) / float64(s.Done)
		s.AsyCmds = float64(r.Asynq.Cmds) / float64(s.Done)
	}
	return s
}

func mapsKeys(m map[string]int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(int(q*float64(len(d))), len(d)-1)]
}

// fleetVariants are the variants a scenario runs.
// The recipes as written (x/rate's 30s, the wiki's 0-9s re-queue
// delays) run in steady only: they starve the fleet anywhere (see
// BENCHMARKS.md); their "1s retry" forms run everywhere.
func fleetVariants(sc fleetScenario) []string {
	v := []string{fleetRedsem}
	if sc.Name == "steady" {
		v = append(v, fleetXRate)
	}
	v = append(v, fleetXPoll, fleetXRate1)
	if sc.Local {
		if sc.Name == "steady" {
			v = append(v, fleetLocal)
		}
		v = append(v, fleetLocal1)
	}
	return v
}

// runFleetTables runs every scenario and variant, rounds times, and
// prints the tables.
func runFleetTables(ctx context.Context, out io.Writer, o fleetOptions) error {
	fmt.Fprintf(out, "## fleet: %d asynq processes x %d handlers, %d tasks for %d customers, API %d at once and %d/s (429 + Retry-After %ds), calls 150-350ms\n\n",
		fleetProcs, fleetHandlers, o.Tasks, fleetCustomers, apiLimit, apiRate, apiRetryAfter)
	fmt.Fprintf(out, "Go %s, GOMAXPROCS %d, NumCPU %d, %s; per-run timeout %v\n\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), time.Now().Format("2006-01-02 15:04"), o.Timeout)
	var runs []fleetRun
	for round := range o.Rounds {
		for _, sc := range fleetScenarios {
			if len(o.Scenarios) > 0 && !slices.Contains(o.Scenarios, sc.Name) {
				continue
			}
			for _, v := range fleetVariants(sc) {
				if len(o.Variants) > 0 && !slices.Contains(o.Variants, v) {
					continue
				}
				r, err := runFleet(ctx, sc, v, round+1, o)
				if err != nil {
					return fmt.Errorf("fleet %s, %s: %w", sc.Name, v, err)
				}
				s := r.stats()
				fmt.Fprintf(os.Stderr, "fleet: %s, %s, round %d: %d/%d done in %.1fs, %d 429s, %.2f re-queues/task, load %.1f\n",
					sc.Name, v, round+1, s.Done, r.N, s.Wall.Seconds(), s.TooMany, s.Requeues, r.Load[1])
				runs = append(runs, r)
			}
		}
	}
	printFleet(out, runs)
	return nil
}

func printFleet(out io.Writer, runs []fleetRun) {
	rounds := 0
	for _, r := range runs {
		rounds = max(rounds, r.Round)
	}
	fmt.Fprintln(out, "| scenario | variant | done | wall s | goodput | mid calls/s (×18) | 429s (conc/rate) | sent inside Retry-After | busy re-queues/task | failed runs | p50 s | p99 s | Jain | longest gap s | full speed after s | peak sent at once | max sent in 1 s | limiter Redis cmds/task sent (run) | limiter Redis CPU µs/task | asynq Redis cmds/task |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	var notes []string
	for _, r := range runs {
		s := r.stats()
		name := r.Scenario.Name
		if rounds > 1 {
			name = fmt.Sprintf("%s #%d", name, r.Round)
		}
		done := fmt.Sprintf("%d/%d", s.Done, r.N)
		if r.TimedOut {
			done += " (timeout)"
		}
		full := "never"
		if s.FullSpeed >= 0 {
			full = fmt.Sprintf("%.1f", s.FullSpeed.Seconds())
		}
		fmt.Fprintf(out, "| %s | %s | %s | %.1f | %.2f | %.1f (%.2f) | %d (%d/%d) | %d | %.2f | %d | %.1f | %.1f | %.2f | %.2f | %s | %d | %d | %.1f (%.1f) | %.0f | %.1f |\n",
			name, r.Variant, done, s.Wall.Seconds(), s.Goodput, s.MidRate, s.MidRate/fleetRate,
			s.TooMany, s.Conc, s.RateRej, s.InsideRA, s.Requeues, s.Failed, s.P50.Seconds(), s.P99.Seconds(),
			s.Jain, s.Gap.Seconds(), full, s.PeakSent, s.MaxPer1s, s.LimSent, s.LimCmds, s.LimCPU, s.AsyCmds)
		n := fmt.Sprintf("- %s, %s: re-queues %s; calls/s per customer over the first %.1fs: %s; %d accepted calls not done (cut short or repeated); load %.1f→%.1f",
			name, r.Variant, orNone(s.RequeueKinds), s.JainWindow.Seconds(), s.Shares, s.Wasted, r.Load[0], r.Load[1])
		n += fmt.Sprintf("; longest gap from %.1fs", s.GapAt.Seconds())
		if s.InsideRA > 0 {
			n += fmt.Sprintf("; sent inside a Retry-After up to %v after its 429", s.InsideAge.Round(time.Millisecond))
		}
		if !r.RestartAt.IsZero() {
			n += fmt.Sprintf("; restart at %.1fs", r.RestartAt.Sub(r.T0).Seconds())
		}
		if s.FirstErr != "" {
			n += "; first failure: " + s.FirstErr
		}
		if s.Done > 0 && r.Variant == fleetRedsem {
			sentBy := map[string]int64{}
			for _, rep := range r.Reports {
				for k, v := range rep.SentBy {
					sentBy[k] += v
				}
			}
			n += "\n  - limiter commands per task, sent: " + perTask(sentBy, s.Done)
			n += "\n  - run by Redis (commandstats): " + perTask(r.CmdStats, s.Done)
		}
		notes = append(notes, n)
	}
	fmt.Fprintln(out)
	for _, n := range notes {
		fmt.Fprintln(out, n)
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
