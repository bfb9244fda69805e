package limiterprom_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
	"github.com/redsem/redsem/limiter/limiterprom"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

var _ limiter.Observer = (*limiterprom.Collector)(nil)

// A Client given the Collector reports a semaphore's acquisitions and
// leases, a RateLimit's events by outcome, and an Inspector's pauses.
func TestCollectorCountsWhatTheClientDoes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := limiterprom.NewCollector()
	c := redistest.Limiter(t, redistest.StartServer(t).Client(t), limiter.Observe(m))
	sem, err := c.Semaphore("metered", 1)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx); err == nil {
		t.Fatal("second TryAcquire of a limit 1 succeeded")
	}
	held := metricValue(t, m, `redsem_leases_held{name="metered"}`)
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rl, err := c.RateLimit("metered", limiter.Rate{Events: 1, Per: time.Minute, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := rl.Allow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := inspect.New(c).Pause(ctx, "metered", time.Second); err != nil {
		t.Fatal(err)
	}
	if held != 1 {
		t.Errorf("redsem_leases_held while held = %v, want 1", held)
	}
	for _, tc := range []struct {
		metric string
		want   float64
	}{
		{`redsem_acquire_total{name="metered",outcome="acquired"}`, 1},
		{`redsem_acquire_total{name="metered",outcome="busy"}`, 1},
		{`redsem_leases_held{name="metered"}`, 0},
		{`redsem_rate_events_total{name="metered",outcome="reserved"}`, 1},
		{`redsem_rate_events_total{name="metered",outcome="busy"}`, 1},
		{`redsem_pauses_total{name="metered"}`, 1},
	} {
		if got := metricValue(t, m, tc.metric); got != tc.want {
			t.Errorf("%s = %v, want %v", tc.metric, got, tc.want)
		}
	}
}

// metricValue reads one sample, written as the text format names it.
func metricValue(t *testing.T, c prometheus.Collector, sample string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			if f.GetName()+"{"+strings.Join(labels, ",")+"}" == sample {
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func ExampleNewCollector() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	m := limiterprom.NewCollector()
	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	reg.MustRegister(m)
	lc, err := limiter.New(rdb, limiter.Observe(m))
	if err != nil {
		panic(err)
	}
	defer lc.Close(ctx)
	sem, _ := lc.Semaphore("partner-api", 5)
	if err := sem.Do(ctx, func(ctx context.Context) error { return nil }); err != nil {
		panic(err)
	}
	families, _ := reg.Gather()
	fmt.Println(families[0].GetName())
	// Output: redsem_acquire_total
}
