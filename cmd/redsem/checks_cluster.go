package main

import (
	"context"
	"fmt"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// checkSlots: a semaphore lives in one slot; while a slot has no serving
// master, every semaphore in it can grant nothing. Each master reports its
// own view of the Cluster.
func checkSlots(ctx context.Context, n *node, _ checkEnv) finding {
	f := finding{Node: n.addr, Check: "cluster-slots", Status: statusError}
	text, err := n.rdb.ClusterInfo(ctx).Result()
	if err != nil {
		f.Status, f.Found = statusWarn, fmt.Sprintf("cannot read CLUSTER INFO: %v", err)
		return f
	}
	ci := parseInfo(text)
	state, ok := ci["cluster_state"], atoi(ci["cluster_slots_ok"])
	f.Found = fmt.Sprintf("cluster_state %s, %d of %d slots served", state, ok, clusterSlots)
	if state == "ok" && ok == clusterSlots {
		f.Status = statusOK
		return f
	}
	f.Advice = "semaphores in the slots not served grant nothing: redis-cli --cluster check, then fix or fail over"
	return f
}

// checkReplicas: a failover promotes a replica, which lacks the grants it
// had not received yet unless WaitReplicas made every grant wait for them.
// With WaitReplicas(n) a master with fewer than n replicas gives every
// grant back (ErrNotReplicated).
func checkReplicas(_ context.Context, n *node, env checkEnv) finding {
	const name = "replicas"
	if n.infoErr != nil {
		return infoRefused(n, name)
	}
	f := finding{Node: n.addr, Check: name, Status: statusOK}
	if role := n.info["role"]; role != "master" {
		f.Status, f.Found = statusError, fmt.Sprintf("role %s: a replica refuses the limiter's writes", role)
		f.Advice = "point redsem at the master (or use Sentinel)"
		return f
	}
	have, want := atoi(n.info["connected_slaves"]), env.waitReplicas
	f.Found = fmt.Sprintf("%d connected replica(s), -wait-replicas %d", have, want)
	switch {
	case have < want:
		f.Status = statusError
		f.Found += ": every grant is given back with ErrNotReplicated"
		f.Advice = fmt.Sprintf("attach %d more replica(s), or lower WaitReplicas", want-have)
	case want == 0 && have > 0:
		f.Status = statusWarn
		f.Found += ": a failover can lose the latest grants, which the promoted replica gives again"
		f.Advice = "use limiter.WaitReplicas where failover matters; if your Clients do, pass -wait-replicas N"
	case want > 0 && have > want:
		f.Status = statusWarn
		f.Found += ": a failover may promote a replica that was not waited for"
		f.Advice = "WaitReplicas equal to the replicas, or make failover prefer the replicas waited for"
	case have == 0:
		f.Found += ": no failover to lose grants in (a restart can: see persistence)"
	}
	return f
}
