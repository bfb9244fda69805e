package main

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// checkEnv is what the checks know besides the node.
type checkEnv struct {
	kind         string // deployment.kind
	prefix       string
	waitReplicas int
	ttl          time.Duration
}

// check inspects one node and says what it found.
type check func(ctx context.Context, n *node, env checkEnv) finding

// checksFor lists the checks in the order they are printed. Replication
// means nothing to Redlock's independent nodes, slots only to a Cluster.
func checksFor(kind string) []check {
	cs := []check{checkEviction, checkPersistence, checkVersion, checkACL}
	switch kind {
	case "cluster":
		cs = append(cs, checkSlots, checkReplicas)
	case "server":
		cs = append(cs, checkReplicas)
	}
	return append(cs, checkClock, checkQuarantine)
}

// runChecks runs every check on every node, nodes sorted by address, then
// the checks across nodes.
func runChecks(ctx context.Context, d *deployment, o options) []finding {
	env := checkEnv{kind: d.kind, prefix: o.prefix, waitReplicas: o.doctor.waitReplicas, ttl: o.doctor.ttl}
	sort.Slice(d.nodes, func(i, j int) bool { return d.nodes[i].addr < d.nodes[j].addr })
	fs := append([]finding(nil), d.down...)
	for _, n := range d.nodes {
		for _, c := range checksFor(d.kind) {
			fs = append(fs, c(ctx, n, env))
		}
	}
	if d.kind == "redlock" {
		fs = append(fs, checkSkewBetween(d.nodes))
	}
	return fs
}

// infoRefused is the finding of a check that needs INFO when the node did
// not give it.
func infoRefused(n *node, check string) finding {
	return finding{Node: n.addr, Check: check, Status: statusWarn,
		Found:  fmt.Sprintf("cannot tell: INFO failed: %v", n.infoErr),
		Advice: "grant +info to redsem's user: the limiter reads INFO for its eviction check and restart quarantine"}
}
