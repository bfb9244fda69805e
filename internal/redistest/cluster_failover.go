package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterNode is one line of CLUSTER NODES: what KillMaster needs to find
// a slot's master and its replica.
type clusterNode struct {
	id, addr, master string // master: the id a replica follows, "-" for a master
	isMaster         bool
	slots            [][2]int
}

// parseClusterNodes reads the reply of CLUSTER NODES.
func parseClusterNodes(reply string) []clusterNode {
	var out []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(reply), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		n := clusterNode{id: f[0], addr: f[1], master: f[3], isMaster: strings.Contains(f[2], "master")}
		if i := strings.IndexByte(n.addr, '@'); i >= 0 {
			n.addr = n.addr[:i]
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") { // a slot being migrated
				continue
			}
			lo, hi, found := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if found {
				b, _ = strconv.Atoi(hi)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		out = append(out, n)
	}
	return out
}

func (n clusterNode) serves(slot int) bool {
	for _, r := range n.slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// server returns the node at addr.
func (c *Cluster) server(addr string) *Server {
	for _, s := range c.servers {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// masterAndReplica returns the master serving slot and one replica of it,
// as a live node sees them. Gossip can show a node the master before its
// replica: it asks every node, and again until clusterReadyTimeout.
func (c *Cluster) masterAndReplica(slot int) (master, replica *Server, err error) {
	deadline := time.Now().Add(clusterReadyTimeout)
	for {
		master, replica, err = c.seenMasterAndReplica(slot)
		if err == nil || time.Now().After(deadline) {
			return master, replica, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// seenMasterAndReplica is masterAndReplica's one look at every live node.
func (c *Cluster) seenMasterAndReplica(slot int) (master, replica *Server, err error) {
	err = fmt.Errorf("redistest: no master serves slot %d", slot)
	for _, s := range c.servers {
		reply, cerr := s.command(time.Second, "CLUSTER", "NODES")
		if cerr != nil {
			continue // a node killed before
		}
		nodes := parseClusterNodes(reply)
		for _, m := range nodes {
			if !m.isMaster || !m.serves(slot) {
				continue
			}
			for _, r := range nodes {
				if r.master == m.id {
					return c.server(m.addr), c.server(r.addr), nil
				}
			}
			err = fmt.Errorf("redistest: master %s of slot %d has no replica", m.addr, slot)
		}
	}
	return nil, nil, err
}

// MasterOf returns the master serving key's slot, e.g. to Restart it
// after KillMaster: it comes back empty and rejoins as a replica of the
// master that took its slots over.
func (c *Cluster) MasterOf(t testing.TB, key string) *Server {
	t.Helper()
	m, _, err := c.masterAndReplica(keySlot(key))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// KillMaster kills -9 the master serving key's slot (nothing more leaves
// it; it stays down) and returns its replica once that replica says it is
// the master (role:master), and when it did, within 10 ms: the moment a
// client that knew the new slot map could be served again.
func (c *Cluster) KillMaster(t testing.TB, key string) (promoted *Server, at time.Time) {
	t.Helper()
	master, replica, err := c.masterAndReplica(keySlot(key))
	if err != nil {
		t.Fatal(err)
	}
	master.Stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	for {
		info, err := replica.command(time.Second, "INFO", "replication")
		if err == nil && strings.Contains(info, "role:master") {
			return replica, time.Now()
		}
		if ctx.Err() != nil {
			t.Fatalf("redistest: replica %s of %s not promoted within %v", replica.Addr(), master.Addr(), clusterReadyTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitReplicated returns once every replica's link is up and every master
// has its replicas acknowledging writes (see streaming).
func (c *Cluster) waitReplicated(ctx context.Context) error {
	for _, s := range c.servers {
		for {
			info, err := s.command(time.Second, "INFO", "replication")
			if err == nil && strings.Contains(info, "role:master") {
				if err := streaming(ctx, s.Addr()); err != nil {
					return fmt.Errorf("redistest: master %s: %w", s.Addr(), err)
				}
				break
			}
			if err == nil && strings.Contains(info, "master_link_status:up") {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("redistest: replica %s not in sync: err=%v info=%q", s.Addr(), err, info)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}
