package main

// Multi-process scenarios: the bench binary re-executes itself as worker
// processes (REDSEM_BENCH_WORKER set to the worker's configuration as
// JSON). Each worker connects to the same redis-server, warms up, says
// "ready" on stdout, waits for "go <start> <end>" on stdin (Unix ns, one
// shared wall clock: the workers run on this machine), runs its
// goroutines until end (or until each made its share of acquisitions),
// closes its clients and writes its report as one JSON line on stdout.
// The parent brackets the run with INFO commandstats / INFO cpu and
// merges the workers' timestamps into gaps, waits, fairness and the peak
// number of holders at once (multireport.go).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// workerEnv names the environment variable that turns the binary (the
// bench command or its test binary) into a worker.
const workerEnv = "REDSEM_BENCH_WORKER"

// MultiScenario is a multi-process scenario: Procs worker processes of
// Goroutines goroutines each, every goroutine looping lock -> hold ->
// unlock -> pause on one lock of Limit permits.
type MultiScenario struct {
	Name       string
	Procs      int
	Goroutines int
	Limit      int64
	Hold       time.Duration
	Pause      time.Duration
	// Every, if > 0, paces each goroutine: its i-th ask is not before
	// the run's start + i·Every (all ask at the start; one still waiting
	// at its next time asks again as soon as it got its event).
	Every time.Duration
}

// multiSemLimit is the permits of the multi-process semaphore scenario.
const multiSemLimit = 5

var MultiScenarios = []MultiScenario{
	{Name: "8 procs x 1, mutex, 2ms pause", Procs: 8, Goroutines: 1, Limit: 1, Hold: time.Millisecond, Pause: 2 * time.Millisecond},
	{Name: "8 procs x 4, mutex, no pause", Procs: 8, Goroutines: 4, Limit: 1, Hold: time.Millisecond},
	{Name: fmt.Sprintf("semaphore %d, 4 procs x 8", multiSemLimit), Procs: 4, Goroutines: 8, Limit: multiSemLimit, Hold: time.Millisecond},
}

// MultiLibs are the libraries of the multi-process scenarios: a worker
// finds its Lib here by name. Mutex lets a Lib take part in the mutex
// scenarios, Semaphore in the semaphore one (limit > 1); a peer without a
// semaphore gets an "n/a" row there. Every process has its own go-redis
// client (and redsem Client) anyway, so "redsem 8 clients" has no
// counterpart here.
var MultiLibs = []MultiLib{
	{Lib: contendedLib("redsem"), Mutex: true, Semaphore: true},
	{Lib: contendedLib("redsync default"), Mutex: true},
	{Lib: contendedLib("redsync 10ms"), Mutex: true},
	{Lib: contendedLib("redislock linear"), Mutex: true},
	{Lib: contendedLib("redislock exp"), Mutex: true},
}

func contendedLib(name string) Lib {
	for _, l := range ContendedLibs {
		if l.Name == name {
			return l
		}
	}
	panic("bench: no contended library " + name)
}

// MultiLib is a library of the multi-process scenarios.
type MultiLib struct {
	Lib
	Mutex, Semaphore bool
	// Command, if set, starts a worker that is not this binary (it speaks
	// the same protocol).
	Command func(cfg workerConfig) (*exec.Cmd, error)
	// Unavailable, if set, says why the library cannot run here (its row
	// shows n/a).
	Unavailable string
	// Rate: a rate library (rate.go); its New waits for one event. Its
	// workers warm up on another name, so that the run starts with a
	// whole burst.
	Rate bool
	// OneProcess: a limiter of one process (x/time/rate); its run puts
	// all the scenario's goroutines in one worker (RunRateMulti).
	OneProcess bool
}

func (l MultiLib) supports(sc MultiScenario) bool {
	if sc.Limit > 1 {
		return l.Semaphore
	}
	return l.Mutex
}

// newLocker returns the Locker of lib for a lock of limit permits.
func (l MultiLib) newLocker(p *Proc, key string, limit int64) (Locker, error) {
	if limit == 1 || l.Rate {
		return l.New(p, key)
	}
	if l.Name != "redsem" {
		return nil, fmt.Errorf("%s has no semaphore", l.Name)
	}
	return redsemSemaphore(limit)(p, key)
}

func (l MultiLib) config(sc MultiScenario) string {
	if sc.Limit > 1 && l.Name == "redsem" {
		return fmt.Sprintf("Semaphore limit %d, Acquire + Release; TTL 10s; one redsem Client per process", sc.Limit)
	}
	if l.Name == "redsem" {
		return l.Config + "; one redsem Client per process"
	}
	return l.Config
}

// workerConfig is what a worker process is told, as JSON in workerEnv.
type workerConfig struct {
	Addr       string
	Nodes      []string // the Redlock table's nodes (Addr the first)
	Lib        string
	Key        string
	Proc       int
	Goroutines int
	Limit      int64
	Hold       time.Duration
	Pause      time.Duration
	Every      time.Duration
	// PerGoroutine, if > 0, is how many acquisitions each goroutine makes
	// before it stops (the end then only caps the run).
	PerGoroutine int
}

// acqRec is one acquisition: when the goroutine asked, when the lock call
// returned and when it called unlock (Unix ns).
type acqRec struct {
	G     int   `json:"g"`
	Asked int64 `json:"a"`
	Got   int64 `json:"t"`
	Rel   int64 `json:"r"`
}

// waitRec is a wait the end of the run cut short.
type waitRec struct {
	G     int   `json:"g"`
	Asked int64 `json:"a"`
}

// workerReport is a worker's one JSON line at the end.
type workerReport struct {
	Proc     int       `json:"proc"`
	Acqs     []acqRec  `json:"acqs"`
	Censored []waitRec `json:"censored"`
	GaveUp   int64     `json:"gaveUp"`
	// Cmds is what the worker's go-redis hook saw from "go" to the end,
	// the closing of its clients included.
	Cmds int64  `json:"cmds"`
	Err  string `json:"err,omitempty"`
}

// IsWorker says whether this process was started as a worker.
func IsWorker() bool { return os.Getenv(workerEnv) != "" }

// WorkerMain runs the worker and returns the exit code.
func WorkerMain() int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(os.Getenv(workerEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench worker: bad", workerEnv, err)
		return 2
	}
	// The report goes out even after a failure (with Err set): before
	// "ready", the parent reads it in its place.
	rep, err := runWorker(cfg, os.Stdin, os.Stdout)
	if err != nil {
		rep.Err = err.Error()
	}
	if jerr := json.NewEncoder(os.Stdout).Encode(rep); jerr != nil {
		fmt.Fprintln(os.Stderr, "bench worker:", jerr)
		return 1
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench worker:", err)
		return 1
	}
	return 0
}

func runWorker(cfg workerConfig, in io.Reader, out io.Writer) (rep workerReport, err error) {
	rep.Proc = cfg.Proc
	var lib *MultiLib
	for _, libs := range [][]MultiLib{MultiLibs, RedlockLibs, RateMultiLibs} {
		for i := range libs {
			if libs[i].Name == cfg.Lib {
				lib = &libs[i]
			}
		}
	}
	if lib == nil {
		return rep, fmt.Errorf("unknown library %q", cfg.Lib)
	}
	var sent atomic.Int64
	rdb := redis.NewClient(&redis.Options{Addr: cfg.Addr, ContextTimeoutEnabled: true})
	rdb.AddHook(countHook{&sent})
	p := &Proc{RDB: rdb}
	for i, addr := range cfg.Nodes {
		n := rdb
		if i > 0 {
			n = redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			n.AddHook(countHook{&sent})
		}
		p.Nodes = append(p.Nodes, n)
	}
	closed := false
	defer func() {
		if !closed {
			_ = p.Close()
		}
	}()
	ctx := context.Background()
	lockers := make([]Locker, cfg.Goroutines)
	warmers := lockers
	if lib.Rate { // a rate's warm-up events would eat the run's burst
		warmers = make([]Locker, cfg.Goroutines)
	}
	for g := range lockers {
		if lockers[g], err = lib.newLocker(p, cfg.Key, cfg.Limit); err != nil {
			return rep, err
		}
		if lib.Rate {
			if warmers[g], err = lib.newLocker(p, cfg.Key+":warm-up", cfg.Limit); err != nil {
				return rep, err
			}
		}
	}
	// Warm up every goroutine's connection and the script cache: each
	// locks and unlocks once, all at the same time.
	var wg sync.WaitGroup
	warmErr := make([]error, cfg.Goroutines)
	for g, lock := range warmers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				err := lockUnlock(ctx, lock)
				if !errors.Is(err, errGaveUp) {
					warmErr[g] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(warmErr...); err != nil {
		return rep, fmt.Errorf("warm-up: %w", err)
	}
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return rep, err
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil {
		return rep, fmt.Errorf("waiting for go: %w", err)
	}
	var start, end int64
	if _, err := fmt.Sscanf(line, "go %d %d", &start, &end); err != nil {
		return rep, fmt.Errorf("bad start line %q: %w", line, err)
	}
	sentBefore := sent.Load()
	time.Sleep(time.Until(time.Unix(0, start)))

	runCtx, cancel := context.WithDeadline(ctx, time.Unix(0, end))
	defer cancel()
	unlockCtx := context.WithoutCancel(ctx)
	var (
		mu       sync.Mutex
		firstErr error
		gaveUp   atomic.Int64
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	for g, lock := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var acqs []acqRec
			var censored []waitRec
			defer func() {
				mu.Lock()
				rep.Acqs = append(rep.Acqs, acqs...)
				rep.Censored = append(rep.Censored, censored...)
				mu.Unlock()
			}()
			for i := 0; cfg.PerGoroutine == 0 || i < cfg.PerGoroutine; i++ {
				if d := time.Until(time.Unix(0, start+int64(i)*int64(cfg.Every))); cfg.Every > 0 && d > 0 {
					select {
					case <-time.After(d):
					case <-runCtx.Done():
					}
				}
				if runCtx.Err() != nil {
					return
				}
				asked := time.Now().UnixNano()
				var unlock Unlock
				for {
					var err error
					if unlock, err = lock(runCtx); err == nil {
						break
					}
					if runCtx.Err() != nil {
						censored = append(censored, waitRec{g, asked})
						return
					}
					if !errors.Is(err, errGaveUp) {
						fail(fmt.Errorf("goroutine %d: %w", g, err))
						return
					}
					gaveUp.Add(1)
				}
				got := time.Now().UnixNano()
				if got > end { // granted after the end: not counted
					censored = append(censored, waitRec{g, asked})
					_ = unlock(unlockCtx)
					return
				}
				time.Sleep(cfg.Hold)
				rel := time.Now().UnixNano()
				if err := unlock(unlockCtx); err != nil {
					fail(fmt.Errorf("goroutine %d unlock: %w", g, err))
					return
				}
				acqs = append(acqs, acqRec{g, asked, got, rel})
				if cfg.Pause > 0 {
					select {
					case <-time.After(cfg.Pause):
					case <-runCtx.Done():
					}
				}
			}
		}()
	}
	wg.Wait()
	rep.GaveUp = gaveUp.Load()
	closed = true
	cerr := p.Close()
	rep.Cmds = sent.Load() - sentBefore
	return rep, errors.Join(firstErr, cerr)
}

// MultiOpts sizes one multi-process run.
type MultiOpts struct {
	Procs        int           // 0: the scenario's
	Duration     time.Duration // the run ends after this long
	PerGoroutine int           // > 0: each goroutine stops after this many acquisitions
	ReadyTimeout time.Duration // 0: 60s
}

// MultiRun is one run of one library in one multi-process scenario.
type MultiRun struct {
	Scenario MultiScenario
	Lib      MultiLib
	Procs    int
	Start    int64 // Unix ns
	End      int64 // the end the workers were given
	// PerGoroutine is MultiOpts.PerGoroutine: the run ended when every
	// goroutine made that many acquisitions (End only capped it).
	PerGoroutine int
	Reports      []workerReport
	Counts       counts // commandstats deltas (hook = sum of the workers' Cmds)
	CPUUsec      int64  // redis-server used_cpu_sys + used_cpu_user delta
}

// RunMulti starts the worker processes of one run, lets them go at once
// and collects their reports.
func RunMulti(ctx context.Context, e *Env, sc MultiScenario, lib MultiLib, o MultiOpts) (_ MultiRun, err error) {
	procs := sc.Procs
	if o.Procs > 0 {
		procs = o.Procs
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 60 * time.Second
	}
	run := MultiRun{Scenario: sc, Lib: lib, Procs: procs, PerGoroutine: o.PerGoroutine}
	key := e.key("multi-" + lib.Name)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	ws := make([]*workerProc, procs)
	defer func() {
		for _, w := range ws {
			if w == nil {
				continue
			}
			_ = w.stdin.Close()
			if err != nil && w.cmd.Process != nil {
				_ = w.cmd.Process.Kill()
			}
			_ = w.cmd.Wait()
		}
	}()
	for i := range ws {
		cfg := workerConfig{Addr: e.Addr, Nodes: e.Nodes, Lib: lib.Name, Key: key, Proc: i, Goroutines: sc.Goroutines,
			Limit: sc.Limit, Hold: sc.Hold, Pause: sc.Pause, Every: sc.Every, PerGoroutine: o.PerGoroutine}
		cmd, err := workerCommand(lib, cfg)
		if err != nil {
			return run, err
		}
		w := &workerProc{cmd: cmd, stderr: &lockedBuffer{}, ready: make(chan error, 1), report: make(chan workerResult, 1)}
		cmd.Stderr = w.stderr
		if w.stdin, err = cmd.StdinPipe(); err != nil {
			return run, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return run, err
		}
		if err := cmd.Start(); err != nil {
			return run, fmt.Errorf("start worker: %w", err)
		}
		ws[i] = w
		go readWorker(stdout, w.ready, w.report)
	}
	deadline := time.After(o.ReadyTimeout)
	for i, w := range ws {
		select {
		case err := <-w.ready:
			if err != nil {
				return run, fmt.Errorf("%s worker %d: %w; stderr: %s", lib.Name, i, err, w.stderrText())
			}
		case <-deadline:
			return run, fmt.Errorf("%s: workers not ready within %v", lib.Name, o.ReadyTimeout)
		case <-ctx.Done():
			return run, ctx.Err()
		}
	}
	before, _, err := e.snapshot(ctx)
	if err != nil {
		return run, err
	}
	cpuBefore, err := e.cpuUsec(ctx)
	if err != nil {
		return run, err
	}
	// A little ahead, so that every worker has read the line by then.
	run.Start = time.Now().Add(20 * time.Millisecond).UnixNano()
	run.End = run.Start + int64(o.Duration)
	for i, w := range ws {
		if _, err := fmt.Fprintf(w.stdin, "go %d %d\n", run.Start, run.End); err != nil {
			return run, fmt.Errorf("%s worker %d: %w; stderr: %s", lib.Name, i, err, w.stderrText())
		}
	}
	reportDeadline := time.After(o.Duration + 60*time.Second)
	for i, w := range ws {
		select {
		case r := <-w.report:
			if r.err == nil && r.rep.Err != "" {
				r.err = errors.New(r.rep.Err)
			}
			if r.err != nil {
				return run, fmt.Errorf("%s worker %d: %w; stderr: %s", lib.Name, i, r.err, w.stderrText())
			}
			run.Reports = append(run.Reports, r.rep)
		case <-reportDeadline:
			return run, fmt.Errorf("%s: no report from worker %d", lib.Name, i)
		case <-ctx.Done():
			return run, ctx.Err()
		}
	}
	for i, w := range ws {
		_ = w.stdin.Close()
		if err := w.cmd.Wait(); err != nil {
			return run, fmt.Errorf("%s worker %d: %w; stderr: %s", lib.Name, i, err, w.stderrText())
		}
		ws[i] = nil
	}
	c, err := e.diff(ctx, lib.Lib, before, e.sent.Load())
	if err != nil {
		return run, err
	}
	cpuAfter, err := e.cpuUsec(ctx)
	if err != nil {
		return run, err
	}
	for _, r := range run.Reports {
		c.hook += r.Cmds
	}
	run.Counts, run.CPUUsec = c, cpuAfter-cpuBefore
	return run, nil
}

type workerResult struct {
	rep workerReport
	err error
}

// readWorker reads a worker's "ready" line, then its report.
func readWorker(stdout io.Reader, ready chan<- error, report chan<- workerResult) {
	br := bufio.NewReader(stdout)
	line, err := br.ReadString('\n')
	if err == nil && strings.TrimSpace(line) != "ready" {
		// A worker that failed before it was ready reports the error.
		var rep workerReport
		if jerr := json.Unmarshal([]byte(line), &rep); jerr == nil && rep.Err != "" {
			err = errors.New(rep.Err)
		} else {
			err = fmt.Errorf("expected ready, got %q", line)
		}
	}
	ready <- err
	if err != nil {
		return
	}
	var r workerResult
	r.err = json.NewDecoder(br).Decode(&r.rep)
	report <- r
}

// workerProc is a worker process, seen from the parent.
type workerProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *lockedBuffer
	ready  chan error
	report chan workerResult
}

func (w *workerProc) stderrText() string { return strings.TrimSpace(w.stderr.String()) }

// lockedBuffer collects a worker's stderr, readable while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// workerCommand is this binary as a worker, or lib's own command.
func workerCommand(lib MultiLib, cfg workerConfig) (*exec.Cmd, error) {
	var cmd *exec.Cmd
	if lib.Command != nil {
		var err error
		if cmd, err = lib.Command(cfg); err != nil {
			return nil, err
		}
	} else {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cmd = exec.Command(exe)
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd.Env = append(os.Environ(), workerEnv+"="+string(js))
	cmd.SysProcAttr = sysProcAttr()
	return cmd, nil
}

// cpuUsec is redis-server's used_cpu_sys + used_cpu_user in µs.
func (e *Env) cpuUsec(ctx context.Context) (int64, error) {
	info, err := e.admin.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, err := strconv.ParseFloat(infoField(info, f), 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s: %w", f, err)
		}
		total += v
	}
	return int64(total * 1e6), nil
}
