package torture

import (
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
)

// Redlock over 3 nodes. A semaphore of limit L needs ⌊3L/(L+1)⌋+1 nodes
// (limiter.NewRedlock): only a mutex survives a node's failure on 3, so
// the Redlock scenarios use one.
func redlock(name string, nodes []*redistest.Server, fault func(t *testing.T, r *run)) spec {
	tg := target{redlock: true}
	for _, n := range nodes {
		tg.addrs = append(tg.addrs, n.Addr())
	}
	return spec{name: name, target: tg, limit: 1, maxWeight: 1, ttls: ttls, fault: fault}
}

// A node stopped, and restarted empty once every lease it had has
// expired (what limiter.NewRedlock asks of a node that restarts empty).
func redlockStop(t *testing.T, sz size) {
	nodes := redistest.StartNodes(t, 3)
	addRow(runScenario(t, sz, redlock("redlock-stop", nodes, func(t *testing.T, r *run) {
		faults(sz, func(i int) {
			n := nodes[i%len(nodes)]
			n.Stop(t)
			time.Sleep(longestTTL + 500*time.Millisecond)
			n.Restart(t)
		})
		r.note("a node down %dx%v, then back empty", sz.repeats, longestTTL+500*time.Millisecond)
	})))
}

// A node paused longer than every TTL, then resumed with its stale
// leases.
func redlockPause(t *testing.T, sz size) {
	nodes := redistest.StartNodes(t, 3)
	addRow(runScenario(t, sz, redlock("redlock-pause", nodes, func(t *testing.T, r *run) {
		faults(sz, func(i int) {
			n := nodes[i%len(nodes)]
			n.Pause(t)
			time.Sleep(longestTTL + 500*time.Millisecond)
			n.Resume(t)
		})
		r.note("a node paused %dx%v", sz.repeats, longestTTL+500*time.Millisecond)
	})))
}
