package dashboard_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// /metrics exports the fleet's per-name gauges from the latest sample.
func TestMetrics(t *testing.T) {
	f := newFixture(t)
	jobs := f.sem(t, "jobs", 3, limiter.AcquireTimeout(0))
	f.hold(t, jobs, "a", 3)
	f.queue(t, jobs, 1)
	f.hold(t, f.sem(t, "idle", 2), "b", 1) // no rate state: paused 0
	if err := inspect.New(f.app).SetLimit(f.ctx, "jobs", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := inspect.New(f.app).Pause(f.ctx, "jobs", time.Minute); err != nil {
		t.Fatal(err)
	}
	body := f.eventually(t, "metrics", "the gauges of jobs", func(b string) bool {
		return strings.Contains(b, `redsem_fleet_limit{name="jobs"} 3`) && strings.Contains(b, `redsem_fleet_paused_seconds{name="jobs"}`)
	})
	for _, want := range []string{`redsem_fleet_in_use{name="jobs"} 3`, `redsem_fleet_holders{name="jobs"} 1`,
		`redsem_fleet_waiters{name="jobs"} 1`, `redsem_fleet_oldest_wait_seconds{name="jobs"}`, "redsem_fleet_sample_failed 0",
		`redsem_fleet_paused_seconds{name="idle"} 0`, "redsem_fleet_names_omitted 0"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
}

// /metrics exports a learned limit and rate, the rate per second, and a
// pinned one's value, so that Prometheus keeps their history.
func TestMetricsLearned(t *testing.T) {
	f := newFixture(t)
	f.hold(t, f.sem(t, "sem", 30, limiter.Adaptive(1, 4)), "a", 1)
	rl, err := f.app.RateLimit("rl", limiter.Rate{Events: 600, Per: time.Minute, Burst: 1}, limiter.Adaptive(1, 120))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rl.Allow(f.ctx); err != nil {
		t.Fatal(err)
	}
	f.eventually(t, "metrics", "the learned limit 4 and rate 2/s", func(b string) bool {
		return strings.Contains(b, `redsem_fleet_learned_limit{name="sem"} 4`) && strings.Contains(b, `redsem_fleet_learned_rate_per_second{name="rl"} 2`)
	})
	if err := inspect.New(f.app).SetLimit(f.ctx, "sem", 3); err != nil {
		t.Fatal(err)
	}
	f.eventually(t, "metrics", "the pinned limit 3", func(b string) bool {
		return strings.Contains(b, `redsem_fleet_learned_limit{name="sem"} 3`)
	})
}

// With 1,000 names the overview renders within 200ms on the server
// (raceSlowdown times that under -race): it reads the sample, not Redis.
func TestThousandNames(t *testing.T) {
	f := newFixture(t)
	in := inspect.New(f.app)
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for i := range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- in.SetLimit(f.ctx, fmt.Sprintf("tenant:%04d", i), int64(i%7+1))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	f.eventually(t, "api/overview", "1000 names sampled", func(b string) bool { return len(decode[overviewJSON](t, b).Names) == 1000 })
	for _, path := range []string{"/", "/api/overview", "/?match=tenant:09*"} {
		best, size := time.Hour, 0
		for range 3 {
			rec := httptest.NewRecorder()
			start := time.Now()
			f.dash.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			best = min(best, time.Since(start))
			if rec.Code != 200 || rec.Body.Len() < 1000 {
				t.Fatalf("%s: %d, %d bytes", path, rec.Code, rec.Body.Len())
			}
			size = rec.Body.Len()
		}
		t.Logf("%s with 1000 names: %v on the server (best of 3), %d bytes", path, best, size)
		if bound := raceSlowdown * 200 * time.Millisecond; best > bound {
			t.Errorf("%s took %v with 1000 names, over %v", path, best, bound)
		}
	}
}
