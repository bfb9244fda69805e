package dashboard

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The fleet gauges: per name, what Redis holds, for every process at
// once (the limiter's own Collector counts one process's calls).
var (
	inUseDesc      = fleetDesc("in_use", "Permits in use: the holders' weights summed.")
	limitDesc      = fleetDesc("limit", "The fleet-wide limit stored in Redis (absent when none is: each process uses its own).")
	inUseLimitDesc = fleetDesc("limit_in_use", "The limit the name runs at: the fleet-wide limit, else the one its processes' Semaphores apply (absent when they disagree or none recorded one).")
	holdersDesc    = fleetDesc("holders", "Live leases.")
	waitersDesc    = fleetDesc("waiters", "Requests in the wait queue.")
	waitDesc       = fleetDesc("oldest_wait_seconds", "How long the longest waiting request has waited, as the dashboard's sampler saw it.")
	pausedDesc     = fleetDesc("paused_seconds", "How long the name stays paused (0: not paused).")
	learnedDesc    = fleetDesc("learned_limit", "The limit learned (limiter.Adaptive; a fraction: the one applied is its floor), or the pinned one (absent when fixed).")
	learnedRDesc   = fleetDesc("learned_rate_per_second", "The rate learned (limiter.Adaptive), or the pinned one, per second (absent when fixed).")
	sampleDesc     = prometheus.NewDesc("redsem_fleet_sample_timestamp_seconds",
		"When the sample these gauges come from was read (Unix time; 0: none yet).", nil, nil)
	failedDesc = prometheus.NewDesc("redsem_fleet_sample_failed",
		"1 when the last sample failed, or none came for 3 intervals (the gauges are then the last good sample's).", nil, nil)
	omittedDesc = prometheus.NewDesc("redsem_fleet_names_omitted",
		"Names beyond the dashboard's MaxNames, neither sampled nor exported.", nil, nil)
)

func fleetDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("redsem_fleet_"+name, help, []string{"name"}, nil)
}

// collector exports the latest sample: a scrape reads no Redis, and costs
// one pass over at most MaxNames names.
type collector struct{ s *sampler }

// Collector returns a prometheus.Collector of per-name gauges read from
// the dashboard's latest sample (redsem_fleet_*): permits in use, fleet
// limit, the limit in use (the fleet's, else the processes' own when
// they agree), holders, waiters, oldest wait, pause; and how many names
// MaxNames leaves out (redsem_fleet_names_omitted). A name whose read
// failed has no gauges. The dashboard's /metrics
// serves it alone; register it in a registry of your own to export it
// beside your other metrics. A scrape reads no Redis: after Close, or
// while sampling fails, it reports the last good sample (see
// redsem_fleet_sample_failed).
func (d *Dashboard) Collector() prometheus.Collector { return collector{d.s} }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{inUseDesc, limitDesc, inUseLimitDesc, holdersDesc, waitersDesc, waitDesc, pausedDesc, learnedDesc, learnedRDesc, sampleDesc, failedDesc, omittedDesc} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	snap := c.s.fresh(time.Now())
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	at := 0.0
	if !snap.At.IsZero() {
		at = float64(snap.At.UnixMilli()) / 1000
	}
	gauge(sampleDesc, at)
	gauge(failedDesc, boolValue(snap.Err != ""))
	gauge(omittedDesc, float64(snap.Omitted))
	for _, v := range snap.Names {
		if v.Err != "" { // not read: nothing to say of it
			continue
		}
		paused := 0.0
		if v.Rate != nil {
			paused = float64(v.Rate.PausedMs) / 1000
		}
		gauge(pausedDesc, paused, v.Name)
		for d, l := range map[*prometheus.Desc]float32{learnedDesc: v.learnedLimit(), learnedRDesc: v.learnedRate()} {
			if !math.IsNaN(float64(l)) {
				gauge(d, float64(l), v.Name)
			}
		}
		if !v.Semaphore {
			continue
		}
		gauge(inUseDesc, float64(v.InUse), v.Name)
		if v.FleetLimit != nil {
			gauge(limitDesc, float64(*v.FleetLimit), v.Name)
		}
		if l := v.limit(); l != nil {
			gauge(inUseLimitDesc, float64(*l), v.Name)
		}
		gauge(holdersDesc, float64(len(v.Holders)), v.Name)
		gauge(waitersDesc, float64(len(v.Waiters)), v.Name)
		gauge(waitDesc, float64(v.OldestWaitMs)/1000, v.Name)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
