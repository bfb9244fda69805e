package limiter

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Acquire outcomes, the "outcome" label of redsem_acquire_total and (but
// "reserved" for "acquired") of redsem_rate_events_total.
const (
	outcomeAcquired = "acquired"
	outcomeBusy     = "busy"     // TryAcquire found no room
	outcomeTimeout  = "timeout"  // AcquireTimeout ran out
	outcomeCanceled = "canceled" // the caller's context ended
	outcomeError    = "error"    // Redis failed
	outcomeReserved = "reserved" // a rate gave the event its time
)

// Collector is a prometheus.Collector for the semaphores that were given
// it with the Metrics option. Nothing is registered globally: register it
// with the registry of your choice.
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

// The methods below are safe on a nil *Collector, so code reports
// unconditionally.

func (c *Collector) acquired(name, outcome string, waited time.Duration) {
	if c == nil {
		return
	}
	c.acquires.WithLabelValues(name, outcome).Inc()
	c.wait.WithLabelValues(name).Observe(waited.Seconds())
}

func (c *Collector) held(name string, delta float64) {
	if c != nil {
		c.heldLeases.WithLabelValues(name).Add(delta)
	}
}

func (c *Collector) lost(name string) {
	if c != nil {
		c.lostLeases.WithLabelValues(name).Inc()
	}
}

func (c *Collector) refreshFailed(name string) {
	if c != nil {
		c.refreshFailure.WithLabelValues(name).Inc()
	}
}

// rated counts a rate's event by outcome, and a reserved one's wait.
func (c *Collector) rated(name, outcome string, wait time.Duration) {
	if c == nil {
		return
	}
	c.rateEvents.WithLabelValues(name, outcome).Inc()
	if outcome == outcomeReserved {
		c.rateWait.WithLabelValues(name).Observe(wait.Seconds())
	}
}

func (c *Collector) paused(name string) {
	if c != nil {
		c.pauses.WithLabelValues(name).Inc()
	}
}
