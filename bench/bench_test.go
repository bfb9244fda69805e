package main

// go test -run '^$' -bench . -benchtime 1s   (from bench/)
//
// The scenarios are those of main.go (scenarios.go); main.go also prints
// ratios against redsem. Custom metrics: commands per acquisition
// (commandstats), gap/handoff/wait percentiles in ms, reacquisitions.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redsem/redsem/limiter"
)

var (
	envOnce sync.Once
	envSrv  *redisServer
	envVal  *Env
	envErr  error
)

// benchEnv starts redis-server (or uses REDIS_ADDR) on first use, so a run
// that selects nothing starts nothing.
func benchEnv(tb testing.TB) *Env {
	tb.Helper()
	envOnce.Do(func() {
		if envSrv, envErr = startRedis(); envErr != nil {
			return
		}
		envVal, envErr = NewEnv(context.Background(), envSrv.Addr)
	})
	if envErr != nil {
		tb.Fatal(envErr)
	}
	return envVal
}

func TestMain(m *testing.M) {
	if IsWorker() { // a multi-process scenario re-executes the test binary
		os.Exit(WorkerMain())
	}
	code := m.Run()
	if envVal != nil {
		envVal.Close()
	}
	envSrv.Stop()
	os.Exit(code)
}

func timer(b *testing.B) Timer { return Timer{Start: b.ResetTimer, Stop: b.StopTimer} }

func BenchmarkUncontended(b *testing.B) {
	env := benchEnv(b)
	for _, lib := range UncontendedLibs {
		b.Run(lib.Name, func(b *testing.B) {
			r, err := RunUncontended(context.Background(), env, lib, b.N, timer(b))
			if err != nil {
				b.Fatal(err)
			}
			reportCounts(b, r, "op")
		})
	}
}

func BenchmarkContended(b *testing.B) { benchContended(b, MutexLoop, ContendedLibs) }

func BenchmarkContendedThink(b *testing.B) { benchContended(b, MutexThink, ContendedLibs) }

func BenchmarkSemaphore(b *testing.B) { benchContended(b, SemaphoreLoop, []Lib{SemaphoreLib}) }

func benchContended(b *testing.B, sc Contention, libs []Lib) {
	env := benchEnv(b)
	for _, lib := range libs {
		b.Run(lib.Name, func(b *testing.B) {
			r, err := RunContended(context.Background(), env, sc, lib, b.N, 0, timer(b))
			if err != nil {
				b.Fatal(err)
			}
			if r.Violations > 0 {
				b.Fatalf("%s: limit %d exceeded %d times", lib.Name, sc.Limit, r.Violations)
			}
			b.ReportMetric(r.OpsPerSec(), "acq/s")
			if sc.Limit == 1 {
				b.ReportMetric(msf(r.GapP50), "gap-p50-ms")
				b.ReportMetric(msf(r.GapP99), "gap-p99-ms")
				b.ReportMetric(msf(r.HandoffP50), "handoff-p50-ms")
				b.ReportMetric(msf(r.HandoffP99), "handoff-p99-ms")
				b.ReportMetric(r.ReacquiredPct(), "reacq-%")
			}
			b.ReportMetric(msf(r.WaitP99), "wait-p99-ms")
			b.ReportMetric(msf(r.WaitMax), "wait-max-ms")
			reportCounts(b, r, "acq")
		})
	}
}

func reportCounts(b *testing.B, r Result, per string) {
	b.ReportMetric(r.ClientPerOp(), "cmds/"+per)
	b.ReportMetric(r.ServerPerOp(), "srv-calls/"+per)
	b.ReportMetric(r.ServerUsecPerOp(), "srv-µs/"+per)
	if !r.CountsAgree() {
		b.Logf("commandstats client count %d (%d pub/sub) != hook count %d", r.ClientCmds, r.PubSubCmds, r.HookCmds)
	}
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// TestSmoke runs every scenario briefly: the libraries work as configured,
// nobody exceeds the limit, and commandstats agrees with the clients' own
// count of what they sent.
func TestSmoke(t *testing.T) {
	env := benchEnv(t)
	ctx := context.Background()
	check := func(r Result, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%s/%s", r.Scenario, r.Lib.Name)
		if r.N == 0 || r.Violations > 0 {
			t.Errorf("%s: n=%d violations=%d", name, r.N, r.Violations)
		}
		if !r.CountsAgree() {
			t.Errorf("%s: commandstats client count %d (%d pub/sub) != hook count %d", name, r.ClientCmds, r.PubSubCmds, r.HookCmds)
		}
		if r.Scenario != BusyScenario && r.ClientPerOp() < 2 {
			t.Errorf("%s: %.2f commands per acquisition, want >= 2", name, r.ClientPerOp())
		}
	}
	for _, lib := range UncontendedLibs {
		check(RunUncontended(ctx, env, lib, 20, Timer{}))
	}
	for _, lib := range BusyLibs { // RunBusy fails if an attempt is granted
		check(RunBusy(ctx, env, lib, 20))
	}
	for _, lib := range ContendedLibs {
		check(RunContended(ctx, env, MutexLoop, lib, 30, 5*time.Second, Timer{}))
	}
	check(RunContended(ctx, env, SemaphoreLoop, SemaphoreLib, 30, 5*time.Second, Timer{}))
}

// TestSmokeMultiProcess runs every multi-process scenario tiny (2 worker
// processes, about 50 acquisitions) with every library that supports it:
// every worker reports, the acquisitions add up, the merged timestamps
// never show more holders than the limit, and commandstats agrees with the
// workers' hooks. (The subtests keep the scenarios' full-size names.)
func TestSmokeMultiProcess(t *testing.T) {
	env := benchEnv(t)
	const procs, total = 2, 50
	for _, sc := range MultiScenarios {
		for _, lib := range MultiLibs {
			if !lib.supports(sc) || lib.Unavailable != "" {
				continue
			}
			t.Run(sc.Name+"/"+lib.Name, func(t *testing.T) {
				per := (total + procs*sc.Goroutines - 1) / (procs * sc.Goroutines)
				r, err := RunMulti(context.Background(), env, sc, lib, MultiOpts{Procs: procs, PerGoroutine: per, Duration: 30 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				s := r.Analyze()
				if len(r.Reports) != procs {
					t.Errorf("%d reports, want %d", len(r.Reports), procs)
				}
				if want := procs * sc.Goroutines * per; s.N != want || s.Unfinished != 0 {
					t.Errorf("%d acquisitions (%d unfinished), want %d", s.N, s.Unfinished, want)
				}
				if s.ProcMin != sc.Goroutines*per || s.ProcMax != sc.Goroutines*per {
					t.Errorf("acquisitions per process %d..%d, want %d", s.ProcMin, s.ProcMax, sc.Goroutines*per)
				}
				if s.Peak > sc.Limit || s.Violations > 0 {
					t.Errorf("peak %d holders at once (limit %d), %d violations", s.Peak, sc.Limit, s.Violations)
				}
				if !s.CountsAgree() {
					t.Errorf("commandstats client count %d (%d pub/sub) != hook count %d", s.Counts.client, s.Counts.pubsub, s.HookCmds)
				}
				if s.CmdsPerAcq() < 2 || s.SrvCallsPerAcq() < 2 {
					t.Errorf("%.2f commands, %.2f server calls per acquisition, want >= 2", s.CmdsPerAcq(), s.SrvCallsPerAcq())
				}
				t.Logf("%d acquisitions in %v, peak %d, %.2f cmds/acq, %.1f srv calls/acq", s.N, s.Elapsed.Round(time.Millisecond), s.Peak, s.CmdsPerAcq(), s.SrvCallsPerAcq())
			})
		}
	}
}

// TestAnalyzeMerged checks the merge of the workers' timestamps on made-up
// reports: the gap from a release to the next acquisition while somebody
// waits, waits cut short at the end, fairness, and an overlap of two
// holders of a mutex showing as peak 2.
func TestAnalyzeMerged(t *testing.T) {
	ms := int64(time.Millisecond)
	run := MultiRun{
		Scenario: MultiScenario{Name: "test", Procs: 2, Goroutines: 1, Limit: 1},
		Procs:    2, Start: 0, End: 100 * ms,
		Reports: []workerReport{
			{Proc: 0, Acqs: []acqRec{{0, 0, 1 * ms, 10 * ms}, {0, 10*ms + 8*ms/10, 13 * ms, 20 * ms}}},
			{Proc: 1, Acqs: []acqRec{{0, 2 * ms, 10*ms + ms/2, 11 * ms}}, Censored: []waitRec{{0, 60 * ms}}},
		},
	}
	s := run.Analyze()
	if s.N != 3 || s.Unfinished != 1 || s.Peak != 1 || s.Violations != 0 {
		t.Fatalf("n=%d unfinished=%d peak=%d violations=%d", s.N, s.Unfinished, s.Peak, s.Violations)
	}
	// Gaps: 10ms -> 10.5ms (proc 1 waited), 11ms -> 13ms (proc 0 waited).
	if s.Gaps != 2 || s.GapP50 != time.Duration(ms/2) || s.GapP99 != 2*time.Millisecond || s.SameProc != 0 {
		t.Errorf("gaps %d p50 %v p99 %v same-proc %d", s.Gaps, s.GapP50, s.GapP99, s.SameProc)
	}
	// Waits: 1, 2, 8.5 ms and 40 ms cut short.
	if s.WaitMax != 40*time.Millisecond || s.ProcMin != 1 || s.ProcMax != 2 || s.Fairness() != 2 {
		t.Errorf("wait max %v, per process %d..%d", s.WaitMax, s.ProcMin, s.ProcMax)
	}
	run.Reports[1].Acqs[0].Got = 9 * ms // overlaps proc 0's first hold
	if s := run.Analyze(); s.Peak != 2 || s.Violations != 1 {
		t.Errorf("overlap: peak %d violations %d, want 2 and 1", s.Peak, s.Violations)
	}
}

// TestSmokeRate runs the rate scenarios tiny: every uncontended Allow is
// granted with one command (x/time/rate: none), and the waiters in 2
// processes (x/time/rate: 1) get events without exceeding the rate,
// commandstats agreeing with their hooks.
func TestSmokeRate(t *testing.T) {
	env := benchEnv(t)
	ctx := context.Background()
	for _, lib := range AllowLibs {
		r, err := RunAllow(ctx, env, lib, 20)
		if err != nil {
			t.Fatal(err)
		}
		calls := 1.0
		if lib.Name == xrateName { // in memory
			calls = 0
		}
		if r.N != 20 || r.ClientPerOp() != calls || !r.CountsAgree() || (calls > 0 && r.CPUUsec <= 0) {
			t.Errorf("%s: n=%d, %.2f cmds/call (hook %d), cpu %dµs", lib.Name, r.N, r.ClientPerOp(), r.HookCmds, r.CPUUsec)
		}
	}
	for _, lib := range RateMultiLibs {
		t.Run(lib.Name, func(t *testing.T) {
			run, err := RunRateMulti(ctx, env, lib, MultiOpts{Procs: 2, Duration: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			s := run.Analyze()
			if s.N < int(waitRate.Burst) || s.N > int(waitRate.Burst+waitRate.Events) {
				t.Errorf("%d events in 500ms at %s", s.N, waitRate)
			}
			if over := run.OverWindows(waitRate, 200*time.Millisecond); over > 0 {
				t.Errorf("%d 200ms windows over the rate", over)
			}
			if late := run.Lateness(waitRate); len(late) != s.N {
				t.Errorf("%d latenesses for %d events", len(late), s.N)
			}
			if !s.CountsAgree() {
				t.Errorf("commandstats client count %d (%d pub/sub) != hook count %d", s.Counts.client, s.Counts.pubsub, s.HookCmds)
			}
			late := run.Lateness(waitRate)
			t.Logf("%d events in %d procs, %.2f cmds/event, late p50 %v p99 %v", s.N, run.Procs, s.CmdsPerAcq(), percentile(late, 50), percentile(late, 99))
		})
	}
}

// OverWindows counts the windows holding more than burst + rate·window
// events; Lateness measures against the burst, then one per interval.
func TestOverWindowsAndLateness(t *testing.T) {
	ms := int64(time.Millisecond)
	r := limiterRate(10, 2) // 10/s: one per 100ms, burst 2
	run := MultiRun{Reports: []workerReport{{Acqs: []acqRec{{Got: 0}, {Got: 0}, {Got: 100 * ms}, {Got: 200 * ms}}}}}
	if over := run.OverWindows(r, 200*time.Millisecond); over != 0 {
		t.Fatalf("paced: %d windows over", over)
	}
	if late := run.Lateness(r); slices.Max(late) != 0 || slices.Min(late) != 0 {
		t.Fatalf("paced: lateness %v", late)
	}
	run.Reports[0].Acqs = append(run.Reports[0].Acqs, acqRec{Got: 0}, acqRec{Got: 350 * ms})
	if over := run.OverWindows(r, 200*time.Millisecond); over != 1 {
		t.Fatalf("3 at once with a burst of 2: %d windows over, want 1", over)
	}
	// Grants 0,0,0,100,200,350 against 0,0,100,200,300,400.
	want := []time.Duration{0, 0, -100 * time.Millisecond, -100 * time.Millisecond, -100 * time.Millisecond, -50 * time.Millisecond}
	if late := run.Lateness(r); !slices.Equal(late, want) {
		t.Fatalf("lateness %v, want %v", late, want)
	}
}

func limiterRate(perSec, burst int64) limiter.Rate {
	return limiter.Rate{Events: perSec, Per: time.Second, Burst: burst}
}
