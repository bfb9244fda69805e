package redistest

import (
	"sync/atomic"
	"time"
)

// Gauge counts the callers inside a section at once, the most ever and
// the total: a test's own, independent check of a concurrency cap. The
// zero value is ready; it is safe for concurrent use.
type Gauge struct {
	now, peak, total atomic.Int64
}

// Enter counts one caller in.
func (g *Gauge) Enter() {
	g.total.Add(1)
	n := g.now.Add(1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

// Leave counts one caller out.
func (g *Gauge) Leave() { g.now.Add(-1) }

// Hold counts one caller in for d.
func (g *Gauge) Hold(d time.Duration) {
	g.Enter()
	time.Sleep(d)
	g.Leave()
}

// Now is how many are inside.
func (g *Gauge) Now() int64 { return g.now.Load() }

// Peak is the most that were inside at once.
func (g *Gauge) Peak() int64 { return g.peak.Load() }

// Total is how many entered in all.
func (g *Gauge) Total() int64 { return g.total.Load() }
