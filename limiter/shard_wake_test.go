package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

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

// BenchmarkClusterWakeCost measures what a contended run on the 3-master
// Cluster costs Redis per acquisition: CPU summed over the masters, and
// cluster-bus messages; then, for a run on one name, the CPU of the two
// masters that do not serve it, which only wake-ups sent over the bus
// cost anything. It was a test that only logged (issue 31): as a
// benchmark it reports metrics and never runs under make test.
func BenchmarkClusterWakeCost(b *testing.B) {
	ctx := ctxT(b, 300*time.Second)
	cl := redistest.StartCluster(b, 3)
	cc := cl.Client(b)
	names := namesInEveryShard(b, ctx, cc)
	contendAcrossShards(b, ctx, cc, cl.Client(b), names, 2, 5) // scripts loaded, connections made
	for _, run := range []struct {
		what  string
		names []string
	}{{"3-names", names}, {"1-name", names[:1]}} {
		b.Run(run.what, func(b *testing.B) {
			const perClient = 8
			rounds := max(1, b.N/(2*len(run.names)*perClient))
			cl.ResetStats(b)
			before := busStats(b, ctx, cc)
			b.ResetTimer()
			n := contendAcrossShards(b, ctx, cc, cl.Client(b), run.names, perClient, rounds)
			b.StopTimer()
			d := busStats(b, ctx, cc).minus(before)
			calls := cl.CommandCalls(b)
			per := func(v float64) float64 { return v / float64(n) }
			owner, err := cc.MasterForKey(ctx, keyOf(run.names[0], "leases"))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(per(d.cpu*1e6), "redis-cpu-µs/acq")
			b.ReportMetric(per((d.cpu-d.cpuOf[owner.Options().Addr])*1e6), "other-masters-cpu-µs/acq")
			b.ReportMetric(per(float64(d.sent)), "bus-msgs/acq")
			b.ReportMetric(per(float64(d.publish)), "bus-publish/acq")
			b.ReportMetric(per(float64(calls["publish"])), "PUBLISH/acq")
			b.ReportMetric(per(float64(calls["spublish"])), "SPUBLISH/acq")
			b.ReportMetric(per(float64(calls["ssubscribe"]+calls["sunsubscribe"])), "SSUB+SUNSUB/acq")
			b.ReportMetric(per(float64(redistest.Scripts(calls))), "scripts/acq")
		})
	}
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
	var mus []acquirer
	for _, rdb := range []redis.UniversalClient{a, b} {
		c := clientFor(t, rdb, limiter.AcquireTimeout(0))
		for _, name := range names {
			m, err := c.Mutex(name)
			if err != nil {
				t.Fatal(err)
			}
			mus = append(mus, m)
		}
	}
	churn(t, ctx, mus, perClient, rounds)
	return 2 * len(names) * perClient * rounds
}

// bus is what every node of a Cluster reports, summed.
type bus struct {
	cpu     float64            // used_cpu_sys + used_cpu_user of the masters, seconds
	cpuOf   map[string]float64 // the same by master address
	sent    int64              // cluster_stats_messages_sent
	publish int64              // cluster_stats_messages_publish_sent
	shard   int64              // cluster_stats_messages_publishshard_sent
}

func (b bus) minus(o bus) bus {
	d := bus{b.cpu - o.cpu, map[string]float64{}, b.sent - o.sent, b.publish - o.publish, b.shard - o.shard}
	for addr, cpu := range b.cpuOf {
		d.cpuOf[addr] = cpu - o.cpuOf[addr]
	}
	return d
}

func busStats(t testing.TB, ctx context.Context, cc *redis.ClusterClient) bus {
	t.Helper()
	var mu sync.Mutex
	sum := bus{cpuOf: map[string]float64{}}
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
			sum.cpuOf[c.Options().Addr] = f["used_cpu_sys"] + f["used_cpu_user"]
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

// promptWake bounds a wake-up by pub/sub: the keep-alive, which makes good
// a lost one, comes about a second (QueueTTL/3) after it. notStranded
// bounds one the keep-alive made good.
const promptWake, notStranded = 300 * time.Millisecond, 2 * time.Second

// Waiters on names in every shard are woken by the release, not by the
// keep-alive a second later.
func TestClusterWakesEveryShardPromptly(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	cl := redistest.StartCluster(t, 3)
	names := namesInEveryShard(t, ctx, cl.Client(t))
	holder, waiter := clientFor(t, cl.Client(t)), clientFor(t, cl.Client(t))
	for range 3 {
		for _, name := range names {
			if d := wakeLatency(t, ctx, holder, waiter, name); d > promptWake {
				t.Fatalf("%s: woken %v after the release, want within %v", name, d, promptWake)
			}
		}
	}
}

// A master failover moves the waiters' subscriptions to the promoted
// master, whether the old one died (its connection breaks) or became a
// replica (it unsubscribes them; the slot map may name it a while
// longer): the next waiters are woken promptly again.
func TestClusterWakesAfterFailover(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failover func(cl *redistest.Cluster, t testing.TB, key string)
	}{
		{"killed", func(cl *redistest.Cluster, t testing.TB, key string) { cl.KillMaster(t, key) }},
		{"manual", func(cl *redistest.Cluster, t testing.TB, key string) { cl.PromoteReplica(t, key) }},
	} {
		t.Run(tc.name, func(t *testing.T) { testWakesAfterFailover(t, tc.failover) })
	}
}

func testWakesAfterFailover(t *testing.T, failover func(cl *redistest.Cluster, t testing.TB, key string)) {
	ctx := ctxT(t, 90*time.Second)
	cl := redistest.StartClusterWithReplicas(t, 3)
	const name = "shard-failover"
	holder := clientFor(t, cl.Client(t), limiter.TTL(30*time.Second))
	waiter := clientFor(t, cl.Client(t), limiter.TTL(30*time.Second))
	if d := wakeLatency(t, ctx, holder, waiter, name); d > promptWake {
		t.Fatalf("before the failover: woken %v after the release", d)
	}
	failover(cl, t, keyOf(name, "leases"))
	redistest.Eventually(t, 30*time.Second, "the promoted master serves the name", func() bool {
		m, _ := holder.Mutex(name)
		l, err := m.TryAcquire(ctx)
		return err == nil && l.Release(ctx) == nil
	})
	for i := range 3 {
		if d := wakeLatency(t, ctx, holder, waiter, name); d > promptWake {
			t.Fatalf("round %d after the failover: woken %v after the release, want within %v", i, d, promptWake)
		}
	}
}

// A slot migrated to another master takes its waiters' subscriptions
// along (the server SUNSUBSCRIBEs them), waiters queued across it are not
// stranded, and the next wake-ups are prompt.
func TestClusterWakesAfterSlotMigration(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	cl := redistest.StartCluster(t, 3)
	const name = "shard-migrate"
	holder, waiter := clientFor(t, cl.Client(t)), clientFor(t, cl.Client(t))
	if d := wakeLatency(t, ctx, holder, waiter, name); d > promptWake {
		t.Fatalf("before the migration: woken %v after the release", d)
	}
	migrate := func() { cl.MoveSlot(t, keyOf(name, "leases")) }
	if d := wakeLatency(t, ctx, holder, waiter, name, migrate); d > notStranded {
		t.Fatalf("a wait across the migration ended %v after the release: stranded", d)
	}
	for i := range 3 {
		if d := wakeLatency(t, ctx, holder, waiter, name); d > promptWake {
			t.Fatalf("round %d after the migration: woken %v after the release, want within %v", i, d, promptWake)
		}
	}
}

// On a Ring the script publishes on the name's shard: waiters on names of
// every shard are woken promptly (Listen's one plain subscription, on one
// shard, heard only that shard's).
func TestRingWakesEveryShardPromptly(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	ring, shards := ringOfTwo(t, "ring-wake-", "leases")
	holder, waiter := clientFor(t, ring()), clientFor(t, ring())
	for _, name := range shards {
		if d := wakeLatency(t, ctx, holder, waiter, name); d > promptWake {
			t.Fatalf("%s: woken %v after the release, want within %v", name, d, promptWake)
		}
	}
}

// A Cluster whose ACL refuses SSUBSCRIBE: the Client falls back to its
// plain channel, and its waiters are still woken promptly, by PUBLISH.
func TestClusterWithoutShardPubSubFallsBack(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	cl := redistest.StartCluster(t, 3)
	for _, s := range cl.Servers() {
		if err := s.Client(t).Do(ctx, "ACL", "SETUSER", "default", "-ssubscribe").Err(); err != nil {
			t.Fatal(err)
		}
	}
	names := namesInEveryShard(t, ctx, cl.Client(t))
	holder, waiter := clientFor(t, cl.Client(t)), clientFor(t, cl.Client(t))
	cl.ResetStats(t)
	for _, name := range names {
		if d := wakeLatency(t, ctx, holder, waiter, name); d > promptWake {
			t.Fatalf("%s: woken %v after the release, want within %v", name, d, promptWake)
		}
	}
	if calls := cl.CommandCalls(t); calls["spublish"] != 0 || calls["publish"] == 0 {
		t.Fatalf("%d SPUBLISH, %d PUBLISH: want the plain channel", calls["spublish"], calls["publish"])
	}
}

// wakeLatency has holder hold name and waiter queue for it, runs
// meanwhile (if given) once the waiter is queued, releases, and returns
// how long after the release began the waiter's Acquire returned.
func wakeLatency(t testing.TB, ctx context.Context, holder, waiter *limiter.Client, name string, meanwhile ...func()) time.Duration {
	t.Helper()
	hm, _ := holder.Mutex(name)
	wm, _ := waiter.Mutex(name)
	l, err := hm.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireLater(t, ctx, wm)
	waitQueued(t, ctx, hm)
	for _, f := range meanwhile {
		f()
	}
	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	return (<-got).Sub(released)
}

// acquireLater acquires m in a goroutine, and sends when it got it (then
// releases it).
func acquireLater(t testing.TB, ctx context.Context, m *limiter.Semaphore) <-chan time.Time {
	got := make(chan time.Time, 1)
	go func() {
		l, err := m.Acquire(ctx)
		at := time.Now()
		if err != nil {
			t.Error(err)
		} else if err := l.Release(ctx); err != nil {
			t.Error(err)
		}
		got <- at
	}()
	return got
}

func waitQueued(t testing.TB, ctx context.Context, m *limiter.Semaphore) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, "the waiter queued", func() bool {
		w, err := waiters(ctx, m)
		return err == nil && len(w) == 1
	})
}

// Close ends waits on every shard and their subscriptions, and leaves no
// goroutine behind.
func TestClusterCloseEndsShardSubscriptions(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) }) // last: after the Cluster stops
	ctx := ctxT(t, 60*time.Second)
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	names := namesInEveryShard(t, ctx, cc)
	holder := clientFor(t, cc)
	c, err := limiter.New(cl.Client(t), limiter.RestartQuarantine(0))
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, len(names))
	for _, name := range names {
		hm, _ := holder.Mutex(name)
		if _, err := hm.TryAcquire(ctx); err != nil {
			t.Fatal(err)
		}
		m, _ := c.Mutex(name)
		go func() {
			_, err := m.Acquire(ctx)
			ended <- err
		}()
		waitQueued(t, ctx, hm)
	}
	if n := shardSubscribers(t, ctx, cc); n != int64(len(names)) {
		t.Fatalf("%d shard channels subscribed for %d names waited on", n, len(names))
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for range names {
		if err := <-ended; !errors.Is(err, limiter.ErrClosed) {
			t.Fatalf("a wait ended by Close: %v, want ErrClosed", err)
		}
	}
	redistest.Eventually(t, 5*time.Second, "no shard channel subscribed", func() bool {
		return shardSubscribers(t, ctx, cc) == 0
	})
}

// shardSubscribers sums PUBSUB SHARDNUMSUB over the masters' shard
// channels.
func shardSubscribers(t testing.TB, ctx context.Context, cc *redis.ClusterClient) int64 {
	t.Helper()
	var mu sync.Mutex
	var n int64
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		chans, err := m.PubSubShardChannels(ctx, "*").Result()
		if err != nil || len(chans) == 0 {
			return err
		}
		counts, err := m.PubSubShardNumSub(ctx, chans...).Result()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range counts {
			n += c
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
