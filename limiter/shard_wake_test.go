package limiter_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// Wake-ups on a Cluster are SPUBLISHed in the name's shard: a plain
// PUBLISH is sent over the cluster bus to every node, so each wake cost
// every master something.

// A contended run across the 3 shards sends no publish over the cluster
// bus: every wake-up is an SPUBLISH, which a master without replicas keeps
// to itself.
func TestClusterWakeStaysInItsShard(t *testing.T) {
	ctx := ctxT(t, 120*time.Second)
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	names := namesInEveryShard(t, ctx, cc)
	before := busStats(t, ctx, cc)
	cl.ResetStats(t)
	n := contendAcrossShards(t, ctx, cc, cl.Client(t), names, 4, 10)
	after := busStats(t, ctx, cc)
	calls := cl.CommandCalls(t)
	t.Logf("%d acquisitions: %d SPUBLISH, %d PUBLISH, bus %+v", n, calls["spublish"], calls["publish"], after.minus(before))
	if calls["spublish"] == 0 {
		t.Fatal("no SPUBLISH: the run woke nobody across Clients, and proves nothing")
	}
	if calls["publish"] != 0 || after.publish != before.publish {
		t.Fatalf("%d PUBLISH, %d cluster-bus publish messages: a wake-up left its shard",
			calls["publish"], after.publish-before.publish)
	}
}

// REDSEM_MEASURE_WAKES=1 prints what a contended run on the 3-master
// Cluster costs Redis per acquisition: CPU summed over the masters, and
// cluster-bus messages.
func TestMeasureClusterWakeCost(t *testing.T) {
	if os.Getenv("REDSEM_MEASURE_WAKES") == "" {
		t.Skip("set REDSEM_MEASURE_WAKES=1 to measure")
	}
	ctx := ctxT(t, 300*time.Second)
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	names := namesInEveryShard(t, ctx, cc)
	contendAcrossShards(t, ctx, cc, cl.Client(t), names, 2, 5) // scripts loaded, connections made
	before := busStats(t, ctx, cc)
	n := contendAcrossShards(t, ctx, cc, cl.Client(t), names, 8, 200)
	d := busStats(t, ctx, cc).minus(before)
	t.Logf("%d acquisitions: %.1f µs Redis CPU (sum over masters), %.2f bus messages (%.2f publish) per acquisition",
		n, d.cpu*1e6/float64(n), float64(d.sent)/float64(n), float64(d.publish)/float64(n))
}

// namesInEveryShard returns a name served by each master.
func namesInEveryShard(t testing.TB, ctx context.Context, cc *redis.ClusterClient) []string {
	t.Helper()
	seen := map[string]bool{}
	var names []string
	for i := 0; len(names) < 3 && i < 1000; i++ {
		name := fmt.Sprint("shard-wake-", i)
		m, err := cc.MasterForKey(ctx, "redsem:{"+name+"}:leases")
		if err != nil {
			t.Fatal(err)
		}
		if !seen[m.Options().Addr] {
			seen[m.Options().Addr] = true
			names = append(names, name)
		}
	}
	if len(names) < 3 {
		t.Fatalf("names on %d masters, want 3", len(names))
	}
	return names
}

// contendAcrossShards runs, on each name (a mutex), perClient goroutines in each of two
// Clients that each acquire and release rounds times; it returns the
// acquisitions.
func contendAcrossShards(t testing.TB, ctx context.Context, a, b redis.UniversalClient, names []string, perClient, rounds int) int {
	t.Helper()
	var wg sync.WaitGroup
	for _, rdb := range []redis.UniversalClient{a, b} {
		c := clientFor(t, rdb, limiter.AcquireTimeout(0))
		for _, name := range names {
			m, err := c.Mutex(name)
			if err != nil {
				t.Fatal(err)
			}
			for range perClient {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range rounds {
						l, err := m.Acquire(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						time.Sleep(time.Millisecond)
						if err := l.Release(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
		}
	}
	wg.Wait()
	return 2 * len(names) * perClient * rounds
}

// bus is what every node of a Cluster reports, summed.
type bus struct {
	cpu     float64 // used_cpu_sys + used_cpu_user, seconds
	sent    int64   // cluster_stats_messages_sent
	publish int64   // cluster_stats_messages_publish_sent
	shard   int64   // cluster_stats_messages_publishshard_sent
}

func (b bus) minus(o bus) bus {
	return bus{b.cpu - o.cpu, b.sent - o.sent, b.publish - o.publish, b.shard - o.shard}
}

func busStats(t testing.TB, ctx context.Context, cc *redis.ClusterClient) bus {
	t.Helper()
	var mu sync.Mutex
	var sum bus
	err := cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "cpu").Result()
		if err != nil {
			return err
		}
		ci, err := c.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		f := fields(info + ci)
		mu.Lock()
		defer mu.Unlock()
		sum.sent += int64(f["cluster_stats_messages_sent"])
		sum.publish += int64(f["cluster_stats_messages_publish_sent"])
		sum.shard += int64(f["cluster_stats_messages_publishshard_sent"])
		if m, _ := c.Do(ctx, "ROLE").Slice(); len(m) > 0 && m[0] == "master" {
			sum.cpu += f["used_cpu_sys"] + f["used_cpu_user"]
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// fields parses "key:value" lines of INFO and CLUSTER INFO.
func fields(s string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if f, err := strconv.ParseFloat(v, 64); ok && err == nil {
			out[k] = f
		}
	}
	return out
}
