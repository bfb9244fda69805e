// Package limiterprom reports what a limiter.Client does as Prometheus
// metrics named redsem_*, labelled by name:
//
//	m := limiterprom.NewCollector()
//	prometheus.MustRegister(m)
//	lc, err := limiter.New(rdb, limiter.Observe(m))
//
// It lives apart from package limiter so that the limiter alone pulls in
// no Prometheus.
package limiterprom

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector is a prometheus.Collector and a limiter.Observer for the
// Clients, semaphores and rate limits given it with limiter.Observe.
// Nothing is registered globally: register it with the registry of your
// choice.
type Collector struct {
	acquires       *prometheus.CounterVec
	wait           *prometheus.HistogramVec
	heldLeases     *prometheus.GaugeVec
	lostLeases     *prometheus.CounterVec
	refreshFailure *prometheus.CounterVec
	rateEvents     *prometheus.CounterVec
	rateWait       *prometheus.HistogramVec
	pauses         *prometheus.CounterVec
}

// NewCollector returns a Collector whose metrics are named redsem_*.
func NewCollector() *Collector {
	return &Collector{
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redsem_acquire_total", Help: "Acquire and TryAcquire calls by outcome.",
		}, []string{"name", "outcome"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "redsem_acquire_wait_seconds", Help: "Time from Acquire to its outcome.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"name"}),
		heldLeases: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "redsem_leases_held", Help: "Leases this process holds.",
		}, []string{"name"}),
		lostLeases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redsem_leases_lost_total", Help: "Leases lost while this process kept them alive.",
		}, []string{"name"}),
		refreshFailure: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redsem_refresh_failures_total", Help: "Refreshes that got no answer from Redis.",
		}, []string{"name"}),
		rateEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redsem_rate_events_total", Help: "Rate limit events (Allow, Wait, ReserveN calls) by outcome; canceled: a reserved event's wait given up (counted reserved too).",
		}, []string{"name", "outcome"}),
		rateWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "redsem_rate_wait_seconds", Help: "The wait a rate limit gave each reserved event.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"name"}),
		pauses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redsem_pauses_total", Help: "Pauses this process set (Inspector.Pause).",
		}, []string{"name"}),
	}
}

func (c *Collector) collectors() []prometheus.Collector {
	return []prometheus.Collector{c.acquires, c.wait, c.heldLeases, c.lostLeases, c.refreshFailure, c.rateEvents, c.rateWait, c.pauses}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.collectors() {
		m.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.collectors() {
		m.Collect(ch)
	}
}

// Acquired implements limiter.Observer.
func (c *Collector) Acquired(name, outcome string, waited time.Duration) {
	c.acquires.WithLabelValues(name, outcome).Inc()
	c.wait.WithLabelValues(name).Observe(waited.Seconds())
}

// Held implements limiter.Observer.
func (c *Collector) Held(name string, delta int) {
	c.heldLeases.WithLabelValues(name).Add(float64(delta))
}

// Lost implements limiter.Observer.
func (c *Collector) Lost(name string) { c.lostLeases.WithLabelValues(name).Inc() }

// RefreshFailed implements limiter.Observer.
func (c *Collector) RefreshFailed(name string) { c.refreshFailure.WithLabelValues(name).Inc() }

// Rated implements limiter.Observer: a reserved event's wait goes to the
// histogram.
func (c *Collector) Rated(name, outcome string, wait time.Duration) {
	c.rateEvents.WithLabelValues(name, outcome).Inc()
	if outcome == "reserved" {
		c.rateWait.WithLabelValues(name).Observe(wait.Seconds())
	}
}

// Paused implements limiter.Observer.
func (c *Collector) Paused(name string) { c.pauses.WithLabelValues(name).Inc() }
