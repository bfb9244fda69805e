package scheduler

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Collector is a prometheus.Collector for schedulers and adopting workers,
// labelled by job. Nothing is registered globally: register it yourself.
// A nil *Collector is valid and counts nothing.
type Collector struct {
	events *prometheus.CounterVec
}

// Event labels of redsem_scheduler_events_total.
const (
	EventTick          = "tick"           // a job's schedule fired
	EventSkippedBusy   = "skipped_busy"   // its lock was held: no enqueue
	EventEnqueued      = "enqueued"       // the task went out with the ticket
	EventEnqueueFailed = "enqueue_failed" // asynq refused it; the lock was released
	EventAdopted       = "adopted"        // a worker resumed the lease
	EventAdoptFailed   = "adopt_failed"   // the lease was gone: the task was skipped
	EventAdoptBusy     = "adopt_busy"     // an earlier run of the tick still held it: re-queued
	EventKept          = "kept"           // a failed run kept the lock for asynq's retry
)

// NewCollector returns a Collector with one counter,
// redsem_scheduler_events_total{job, event}.
func NewCollector() *Collector {
	return &Collector{events: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redsem_scheduler_events_total",
		Help: "Scheduler ticks, skips, enqueues, worker adoptions and locks kept for retries, by job.",
	}, []string{"job", "event"})}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) { c.events.Describe(ch) }

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) { c.events.Collect(ch) }

// Count reads one counter: for tests, demos and logs. A counter never
// incremented, or a nil Collector, gives 0.
func (c *Collector) Count(job, event string) float64 {
	var m dto.Metric
	if c == nil || c.events.WithLabelValues(job, event).Write(&m) != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

func (c *Collector) add(job, event string) {
	if c != nil {
		c.events.WithLabelValues(job, event).Inc()
	}
}
