package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// clusterNodeTimeout is small so failure detection in tests takes
	// seconds, not Redis' default 15 s.
	clusterNodeTimeout = "2000"
	// replicatedNodeTimeout is smaller still for a Cluster with replicas:
	// a replica is promoted a second or three after its master dies,
	// which failover tests wait for.
	replicatedNodeTimeout = "1000"
	// clusterReadyTimeout bounds cluster creation plus convergence.
	clusterReadyTimeout = 30 * time.Second
)

// Cluster is a Redis Cluster of masters, without replicas or with one
// each, built from real cluster-enabled servers owned by a test.
type Cluster struct {
	servers []*Server
}

// StartCluster starts masters cluster-enabled servers, joins them with
// `redis-cli --cluster create`, and returns once every node reports
// cluster_state:ok and a ClusterClient can SET and GET a key in every slot
// range, so tests never race cluster convergence. redis-cli needs at least
// 3 masters. Like StartServer, it fails (never skips) without Redis.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	return startCluster(t, masters, 0, clusterNodeTimeout)
}

// StartClusterWithReplicas is StartCluster with one replica per master
// (cluster-node-timeout 1 s), returning once every replica is in sync and
// acknowledges writes (WAIT 1 succeeds on every master), so a test can
// KillMaster and see a replica promoted.
func StartClusterWithReplicas(t testing.TB, masters int) *Cluster {
	t.Helper()
	return startCluster(t, masters, 1, replicatedNodeTimeout)
}

func startCluster(t testing.TB, masters, replicas int, nodeTimeout string) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: StartCluster needs at least 3 masters (redis-cli --cluster create), got %d", masters)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal(InstallHint + " (redis-cli is also required)")
	}
	c := &Cluster{servers: make([]*Server, masters*(1+replicas))}
	for i := range c.servers {
		c.servers[i] = startServer(t, true, nil, []string{
			"--cluster-enabled", "yes",
			"--cluster-node-timeout", nodeTimeout,
			// No delay before a diskless full sync: Redis waits 5 s by
			// default for more replicas to share it.
			"--repl-diskless-sync-delay", "0",
		}, nil)
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := c.waitStateOK(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.waitWritable(ctx); err != nil {
		t.Fatal(err)
	}
	if replicas > 0 {
		if err := c.waitReplicated(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c.ResetStats(t)
	return c
}

// waitStateOK polls CLUSTER INFO on every node until each one sees all
// slots covered and all masters known.
func (c *Cluster) waitStateOK(ctx context.Context) error {
	want := fmt.Sprintf("cluster_known_nodes:%d", len(c.servers))
	for _, s := range c.servers {
		for {
			info, err := s.command(time.Second, "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, want) {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("redistest: cluster node %s not ready: err=%v info=%q", s.Addr(), err, info)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// waitWritable SETs and GETs one key per slot range through a ClusterClient,
// retrying until every master serves its slots.
func (c *Cluster) waitWritable(ctx context.Context) error {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer cc.Close()
	var lastErr error
	for ctx.Err() == nil {
		if lastErr = checkWritable(ctx, cc); lastErr == nil {
			return nil
		}
		cc.ReloadState(ctx)
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("redistest: cluster %v not writable: %v", c.Addrs(), lastErr)
}

func checkWritable(ctx context.Context, cc *redis.ClusterClient) error {
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return err
	}
	covered := 0
	for _, r := range slots {
		covered += r.End - r.Start + 1
		key, err := keyInRange(r.Start, r.End)
		if err != nil {
			return err
		}
		if err := cc.Set(ctx, key, "ok", 0).Err(); err != nil {
			return fmt.Errorf("SET %s: %w", key, err)
		}
		if v, err := cc.Get(ctx, key).Result(); err != nil || v != "ok" {
			return fmt.Errorf("GET %s = %q, %v", key, v, err)
		}
		if err := cc.Del(ctx, key).Err(); err != nil {
			return fmt.Errorf("DEL %s: %w", key, err)
		}
	}
	if covered != slotCount {
		return fmt.Errorf("slots cover %d of %d", covered, slotCount)
	}
	return nil
}

// Servers returns the cluster nodes, e.g. to Pause or Stop one master.
func (c *Cluster) Servers() []*Server {
	return append([]*Server(nil), c.servers...)
}

// Addrs returns the node addresses, usable as ClusterOptions.Addrs.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.servers))
	for i, s := range c.servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Client returns a new ClusterClient seeded with every node, closed in
// t.Cleanup. opts may adjust the options before the client is created.
func (c *Cluster) Client(t testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: c.Addrs()}
	for _, fn := range opts {
		fn(o)
	}
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// CommandCalls sums Server.CommandCalls over all nodes, so tests can count
// round trips regardless of which master served them.
func (c *Cluster) CommandCalls(t testing.TB) map[string]int64 {
	t.Helper()
	total := make(map[string]int64)
	for _, s := range c.servers {
		for name, n := range s.CommandCalls(t) {
			total[name] += n
		}
	}
	return total
}

// ResetStats runs CONFIG RESETSTAT on every node.
func (c *Cluster) ResetStats(t testing.TB) {
	t.Helper()
	for _, s := range c.servers {
		s.ResetStats(t)
	}
}
