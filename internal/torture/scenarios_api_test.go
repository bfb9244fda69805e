package torture

// Scenarios on a restart, the network and a failover: the restart
// quarantine (limiter.RestartQuarantine), the fault proxy
// (redistest.StartProxy) and Sentinel (redistest.StartFailover,
// limiter.WaitReplicas).

import (
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
)

// Redis restarted empty (no persistence) under its holders. With the
// quarantine (on by default) it grants nothing until its holders have
// heard of their loss; the holder that was holding across the restart is
// told at its next refresh.
func restartEmpty(t *testing.T, sz size) {
	srv := redistest.StartServer(t)
	s := weighted("restart-empty", sz, single(srv), func(t *testing.T, r *run) {
		faults(sz, func(int) {
			r.waitOutlasting(t, longestTTL)
			srv.Restart(t)
		})
		r.note("restarted empty %dx", sz.repeats)
	})
	s.minLost = sz.repeats
	addRow(runScenario(t, sz, s))
}

// The same without the quarantine: others are granted the permits of
// holders not yet told. The danger, shown; reported, never failed on.
// Long version only.
func restartUnguarded(t *testing.T, sz size) {
	if !*long {
		t.Skip("long version only (make torture)")
	}
	srv := redistest.StartServer(t)
	s := weighted("restart-unguarded", sz, single(srv), func(t *testing.T, r *run) {
		faults(sz, func(int) {
			r.waitOutlasting(t, longestTTL)
			srv.Restart(t)
		})
		r.note("restarted empty %dx, RestartQuarantine(0)", sz.repeats)
	})
	s.options, s.unsafe = []string{"no-quarantine"}, true
	addRow(runScenario(t, sz, s))
}

// Every worker reaches Redis through a proxy that black-holes the
// connections for longer than every TTL (Redis keeps running and expires
// the leases), then resets them and lets new ones through. Holders must
// be told before the leases expire in Redis. (Every worker is cut off:
// with some workers outside the proxy, a grant could follow a loss
// notice by less than the observer's round trip, which the log could
// not order.)
func blackhole(t *testing.T, sz size) {
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	d := longestTTL + 500*time.Millisecond
	s := weighted("blackhole", sz, target{addrs: []string{proxy.Addr()}}, func(t *testing.T, r *run) {
		faults(sz, func(int) {
			r.waitOutlasting(t, d)
			proxy.Blackhole()
			time.Sleep(d)
			proxy.Reset()
			proxy.Heal()
		})
		r.note("black-holed %dx%v, then reset", sz.repeats, d)
	})
	s.minLost = sz.repeats
	addRow(runScenario(t, sz, s))
}

// A Sentinel failover: the master killed, a replica promoted. With
// WaitReplicas a grant is on the replica before it is returned. The
// workers, other processes, make their own failover clients: they need
// the sentinels' addresses and the master's name. One failover per run,
// whatever the size: a second would need the old master back as a
// replica.
func failover(t *testing.T, sz size) {
	f := redistest.StartFailover(t)
	s := weighted("failover", sz, target{addrs: f.SentinelAddrs(), sentinelMaster: f.MasterName()}, func(t *testing.T, r *run) {
		once := sz
		once.repeats = 1
		faults(once, func(int) { f.KillMaster(t) })
		r.note("master killed")
	})
	s.options = []string{"wait-replicas"}
	addRow(runScenario(t, sz, s))
}

// A Cluster master killed -9 and its replica promoted. go-redis does not
// reload its slot map on a refused connection; the store does, so grants
// resume soon after the promotion, which the row notes. With
// WaitReplicas the promoted master grants nothing until a replica syncs
// from it: the killed master is restarted (empty) at once, and rejoins
// as its replica.
func clusterMasterKilled(t *testing.T, sz size) {
	c := redistest.StartClusterWithReplicas(t, 3)
	tg := target{addrs: c.Addrs(), cluster: true}
	var s spec
	s = weighted("cluster-master-killed", sz, tg, func(t *testing.T, r *run) {
		time.Sleep(sz.run / 3)
		key := "{" + s.semName() + "}" // the name's hash tag
		dead := c.MasterOf(t, key)
		killed := time.Now()
		_, promoted := c.KillMaster(t, key)
		r.note("promoted %v after the kill", promoted.Sub(killed).Round(time.Millisecond))
		dead.Restart(t)
		g := r.waitGrantAfter(t, promoted)
		r.note("first grant %v after the promotion", time.UnixMicro(g.at).Sub(promoted).Round(time.Millisecond))
		time.Sleep(sz.run / 3)
	})
	s.options = []string{"wait-replicas"}
	addRow(runScenario(t, sz, s))
}

// A Redlock node restarted empty at once, while the others run: the
// quarantine keeps it from granting what it forgot.
func redlockRestart(t *testing.T, sz size) {
	nodes := redistest.StartNodes(t, 3)
	addRow(runScenario(t, sz, redlock("redlock-restart", nodes, func(t *testing.T, r *run) {
		faults(sz, func(i int) { nodes[i%len(nodes)].Restart(t) })
		r.note("a node restarted empty %dx", sz.repeats)
	})))
}
