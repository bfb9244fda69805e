package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// MoveSlot migrates the slot of key, with its keys, from its master to
// another master, as `redis-cli --cluster reshard` does (IMPORTING,
// MIGRATING, MIGRATE, SETSLOT NODE), and returns the two once every node
// says the new master serves it.
func (c *Cluster) MoveSlot(t testing.TB, key string) (from, to *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	slot := keySlot(key)
	src, dst, err := c.mastersFor(slot)
	if err != nil {
		t.Fatal(err)
	}
	from, to = c.server(src.addr), c.server(dst.addr)
	fc := from.Client(t)
	steps := []struct {
		on   *Server
		args []any
	}{
		{to, []any{"CLUSTER", "SETSLOT", slot, "IMPORTING", src.id}},
		{from, []any{"CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id}},
	}
	for _, s := range steps {
		if err := s.on.Client(t).Do(ctx, s.args...).Err(); err != nil {
			t.Fatalf("redistest: %s: %v: %v", s.on.Addr(), s.args, err)
		}
	}
	host, port, _ := strings.Cut(to.Addr(), ":")
	for {
		keys, err := fc.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			t.Fatalf("redistest: GETKEYSINSLOT: %v", err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := fc.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("redistest: MIGRATE: %v", err)
		}
	}
	for _, s := range append([]*Server{to, from}, c.servers...) {
		if err := s.Client(t).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.id).Err(); err != nil {
			t.Fatalf("redistest: %s: SETSLOT NODE: %v", s.Addr(), err)
		}
	}
	for _, s := range c.servers {
		for {
			reply, err := s.command(time.Second, "CLUSTER", "NODES")
			if err == nil && servedBy(reply, slot) == dst.id {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("redistest: %s does not see slot %d moved", s.Addr(), slot)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return from, to
}

// mastersFor returns the master serving slot and another master.
func (c *Cluster) mastersFor(slot int) (src, dst clusterNode, err error) {
	reply, err := c.servers[0].command(time.Second, "CLUSTER", "NODES")
	if err != nil {
		return src, dst, err
	}
	var found, other bool
	for _, n := range parseClusterNodes(reply) {
		switch {
		case n.isMaster && n.serves(slot):
			src, found = n, true
		case n.isMaster && !other:
			dst, other = n, true
		}
	}
	if !found || !other {
		return src, dst, fmt.Errorf("redistest: no two masters for slot %d", slot)
	}
	return src, dst, nil
}

// servedBy returns the id of the master serving slot in a CLUSTER NODES
// reply.
func servedBy(reply string, slot int) string {
	for _, n := range parseClusterNodes(reply) {
		if n.isMaster && n.serves(slot) {
			return n.id
		}
	}
	return ""
}

// PromoteReplica has the replica of the master serving key's slot take
// over by CLUSTER FAILOVER (a graceful, manual failover: the old master
// stays up, as a replica), and returns once the replica says it is the
// master.
func (c *Cluster) PromoteReplica(t testing.TB, key string) (promoted *Server) {
	t.Helper()
	_, replica, err := c.masterAndReplica(keySlot(key))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := replica.command(time.Second, "CLUSTER", "FAILOVER"); err != nil {
		t.Fatalf("redistest: %s: CLUSTER FAILOVER: %v", replica.Addr(), err)
	}
	deadline := time.Now().Add(clusterReadyTimeout)
	for {
		info, err := replica.command(time.Second, "INFO", "replication")
		if err == nil && strings.Contains(info, "role:master") {
			return replica
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica %s not promoted within %v", replica.Addr(), clusterReadyTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
