package asynqmw

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Names of the Collector's series, each labelled by rule (the rule's
// Name: never by key, so a Key rule is one series whatever the number of
// keys). Count reads the counters.
const (
	SeriesGated    = "redsem_asynq_gated_total"         // counter: permits asked for (a task matched by two rules counts in both)
	SeriesWait     = "redsem_asynq_wait_seconds"        // histogram: time waited for a permit, granted or not
	SeriesRequeued = "redsem_asynq_requeued_busy_total" // counter: tasks returned busy for asynq to re-queue
	SeriesLost     = "redsem_asynq_leases_lost_total"   // counter: handlers whose permit was lost while they ran
	SeriesRunning  = "redsem_asynq_running"             // gauge: handlers of this process holding a permit of the rule

	SeriesRateWait   = "redsem_asynq_rate_wait_seconds"       // histogram: how long rate slots were off when reserved (0: free at once)
	SeriesRateWaits  = "redsem_asynq_rate_waits_total"        // counter: rate slots a task had to sleep for
	SeriesRateUnused = "redsem_asynq_rate_slots_unused_total" // counter: rate slots reserved and not used (given back, or come too late)
	SeriesPausesSet  = "redsem_asynq_pauses_total"            // counter: pauses handlers set (PauseError), per rule paused
)

// Collector is a prometheus.Collector for the middleware (see the Series
// constants), labelled by rule name. Nothing is registered globally:
// register it yourself. A nil *Collector is valid and records nothing.
type Collector struct {
	gatedTasks *prometheus.CounterVec
	waits      *prometheus.HistogramVec
	busy       *prometheus.CounterVec
	lostLeases *prometheus.CounterVec
	running    *prometheus.GaugeVec
	rateWait   *prometheus.HistogramVec
	rateWaits  *prometheus.CounterVec
	rateUnused *prometheus.CounterVec
	pauses     *prometheus.CounterVec
}

// NewCollector returns a Collector of the Series* series.
func NewCollector() *Collector {
	return &Collector{
		gatedTasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: SeriesGated, Help: "Permits gated tasks asked for, by rule.",
		}, []string{"rule"}),
		waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: SeriesWait, Help: "Time gated tasks waited for a permit (granted or not), by rule.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"rule"}),
		busy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: SeriesRequeued, Help: "Tasks returned busy for asynq to re-queue, by the rule that was full.",
		}, []string{"rule"}),
		lostLeases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: SeriesLost, Help: "Handlers whose permit was lost while they ran, by rule.",
		}, []string{"rule"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: SeriesRunning, Help: "Handlers of this process holding a permit, by rule.",
		}, []string{"rule"}),
		rateWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: SeriesRateWait, Help: "How long the rate slots gated tasks reserved were off (0: free at once), by rule.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"rule"}),
		rateWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: SeriesRateWaits, Help: "Rate slots gated tasks had to sleep for, by rule.",
		}, []string{"rule"}),
		rateUnused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: SeriesRateUnused, Help: "Rate slots reserved and not used (given back, or come too late), by rule.",
		}, []string{"rule"}),
		pauses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: SeriesPausesSet, Help: "Pauses set by handlers (PauseError), by the rule paused.",
		}, []string{"rule"}),
	}
}

func (c *Collector) all() []prometheus.Collector {
	return []prometheus.Collector{c.gatedTasks, c.waits, c.busy, c.lostLeases, c.running,
		c.rateWait, c.rateWaits, c.rateUnused, c.pauses}
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

// Count reads a counter (SeriesGated, SeriesRequeued, SeriesLost,
// SeriesRateWaits, SeriesRateUnused or SeriesPausesSet) or the
// SeriesRunning gauge of one rule, or of all rules when rule is "": for
// tests, demos and logs. Any other series, or a nil Collector, gives 0.
func (c *Collector) Count(rule, series string) float64 {
	if c == nil {
		return 0
	}
	var vec prometheus.Collector
	switch series {
	case SeriesGated:
		vec = c.gatedTasks
	case SeriesRequeued:
		vec = c.busy
	case SeriesLost:
		vec = c.lostLeases
	case SeriesRunning:
		vec = c.running
	case SeriesRateWaits:
		vec = c.rateWaits
	case SeriesRateUnused:
		vec = c.rateUnused
	case SeriesPausesSet:
		vec = c.pauses
	default:
		return 0
	}
	ch := make(chan prometheus.Metric, 64)
	go func() { vec.Collect(ch); close(ch) }()
	var n float64
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) != nil {
			continue
		}
		if rule != "" && !hasRule(&pb, rule) {
			continue
		}
		n += pb.GetCounter().GetValue() + pb.GetGauge().GetValue()
	}
	return n
}

func hasRule(m *dto.Metric, rule string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == "rule" && l.GetValue() == rule {
			return true
		}
	}
	return false
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

func (c *Collector) runs(rule string, delta float64) {
	if c != nil {
		c.running.WithLabelValues(rule).Add(delta)
	}
}

func (c *Collector) rateWaited(rule string, d time.Duration) {
	if c != nil {
		c.rateWait.WithLabelValues(rule).Observe(d.Seconds())
		if d > 0 {
			c.rateWaits.WithLabelValues(rule).Inc()
		}
	}
}

func (c *Collector) slotUnused(rule string) {
	if c != nil {
		c.rateUnused.WithLabelValues(rule).Inc()
	}
}

func (c *Collector) paused(rule string) {
	if c != nil {
		c.pauses.WithLabelValues(rule).Inc()
	}
}
