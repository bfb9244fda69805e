package asynqmw

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector is a prometheus.Collector for the middleware, labelled by rule
// name. Nothing is registered globally: register it yourself.
type Collector struct {
	gatedTasks *prometheus.CounterVec
	waits      *prometheus.HistogramVec
	busy       *prometheus.CounterVec
	lostLeases *prometheus.CounterVec
}

// NewCollector returns a Collector whose metrics are named redsem_asynq_*.
func NewCollector() *Collector {
	return &Collector{
		gatedTasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redsem_asynq_gated_total", Help: "Tasks a rule matched.",
		}, []string{"rule"}),
		waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "redsem_asynq_wait_seconds", Help: "Time gated tasks waited for a permit (granted or not).",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"rule"}),
		busy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redsem_asynq_requeued_busy_total", Help: "Tasks returned busy for asynq to re-queue.",
		}, []string{"rule"}),
		lostLeases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redsem_asynq_leases_lost_total", Help: "Handlers whose permit was lost while they ran.",
		}, []string{"rule"}),
	}
}

func (c *Collector) all() []prometheus.Collector {
	return []prometheus.Collector{c.gatedTasks, c.waits, c.busy, c.lostLeases}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.all() {
		m.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.all() {
		m.Collect(ch)
	}
}

// The methods below are safe on a nil *Collector.

func (c *Collector) gated(rule string) {
	if c != nil {
		c.gatedTasks.WithLabelValues(rule).Inc()
	}
}

func (c *Collector) waited(rule string, d time.Duration) {
	if c != nil {
		c.waits.WithLabelValues(rule).Observe(d.Seconds())
	}
}

func (c *Collector) requeued(rule string) {
	if c != nil {
		c.busy.WithLabelValues(rule).Inc()
	}
}

func (c *Collector) lost(rule string) {
	if c != nil {
		c.lostLeases.WithLabelValues(rule).Inc()
	}
}
