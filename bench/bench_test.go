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
	"sync"
	"testing"
	"time"
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
		if r.ClientPerOp() < 2 {
			t.Errorf("%s: %.2f commands per acquisition, want >= 2", name, r.ClientPerOp())
		}
	}
	for _, lib := range UncontendedLibs {
		check(RunUncontended(ctx, env, lib, 20, Timer{}))
	}
	for _, lib := range ContendedLibs {
		check(RunContended(ctx, env, MutexLoop, lib, 30, 5*time.Second, Timer{}))
	}
	check(RunContended(ctx, env, SemaphoreLoop, SemaphoreLib, 30, 5*time.Second, Timer{}))
}
