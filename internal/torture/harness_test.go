package torture

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// spec is one scenario: where the workers go, what they ask for, and the
// fault injected while they run.
type spec struct {
	name      string
	target    target
	limit     int64
	maxWeight int64
	ttls      []time.Duration
	options   []string // Client options, by name (clientOptions)
	broken    []int    // workers that ignore loss notices
	// longHolders: each worker has a goroutine that holds one permit for
	// half a TTL to two (workerConfig.LongHolder).
	longHolders bool
	// fault runs while the workers run; they stop when it returns.
	fault func(t *testing.T, r *run)
	// unsafe: the scenario runs a configuration the limiter does not
	// protect; its violations are reported, not failed on.
	unsafe bool
	// minLost is how many holders at least must have been told of loss.
	minLost int
}

// target is the Redis under test, as the workers reach it.
type target struct {
	addrs          []string
	redlock        bool
	sentinelMaster string
	cluster        bool
}

// nodes is how many nodes each acquire attempt asks.
func (t target) nodes() int {
	if t.redlock {
		return len(t.addrs)
	}
	return 1
}

// run is a scenario in progress.
type run struct {
	spec
	sz    size
	obs   *observer
	procs []*proc
	notes []string // shown in the table
	seen  int64    // log records read by follow
	open  map[string]record
}

type proc struct {
	cmd      *exec.Cmd
	out, err bytes.Buffer
	done     chan struct{}
	killed   bool
}

// semName is the semaphore a scenario's workers share.
func (s spec) semName() string { return "torture-" + s.name }

// maxAttemptsPerWait bounds the mean number of acquire attempts per wait
// (on a quorum, script calls per node), far above what waits take (under
// 2 on a node; on a quorum contenders that split the nodes retry, more
// often while a restarted node sits out its quarantine: up to about 10
// with 48 contenders for a mutex): a busy loop makes hundreds.
const maxAttemptsPerWait = 20

// runScenario runs s with its fault and checks the observer's log.
func runScenario(t *testing.T, sz size, s spec) row {
	t.Helper()
	start := time.Now()
	sha, err := acquireSHA()
	if err != nil {
		t.Fatalf("the acquire script's hash (attempts are counted by it): %v", err)
	}
	keys := newObserverKeys(fmt.Sprintf("%s-%d", s.name, time.Now().UnixNano()))
	r := &run{spec: s, sz: sz, obs: newObserver(os.Getenv("REDIS_ADDR"), keys), open: map[string]record{}}
	t.Cleanup(func() { _ = r.obs.rdb.Close() })
	for i := range sz.procs {
		r.procs = append(r.procs, r.startWorker(t, i, workerConfig{
			Proc: i, Goroutines: sz.goroutines, Addrs: s.target.addrs, Redlock: s.target.redlock,
			SentinelMaster: s.target.sentinelMaster, Cluster: s.target.cluster, CtxTimeout: i%2 == 0, Name: s.semName(), Limit: s.limit,
			MaxWeight: s.maxWeight, TTLs: s.ttls, Options: s.options, Observer: os.Getenv("REDIS_ADDR"), Keys: keys,
			SHA: sha, Broken: slices.Contains(s.broken, i), LongHolder: s.longHolders,
		}))
	}
	ctx := context.Background()
	r.waitReady(t)
	r.firstToken(t)
	if err := r.obs.rdb.Set(ctx, keys.Go, 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.fault(t, r)
	if err := r.obs.rdb.Set(ctx, keys.Stop, 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	results := r.waitEnd(t)
	recs, err := r.obs.read(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	v := check(recs, s.limit)
	for _, res := range results {
		if res.Acquired != v.grantsBy[res.Proc] || res.Lost != v.lostBy[res.Proc] {
			v.malformed++
			v.problem("worker %d counted %d grants and %d losses, the log shows %d and %d",
				res.Proc, res.Acquired, res.Lost, v.grantsBy[res.Proc], v.lostBy[res.Proc])
		}
	}
	row := newRow(s.name, sz, v, results, r.notes, time.Since(start))
	t.Log(row.String())
	switch {
	case v.malformed > 0:
		t.Errorf("the log is inconsistent (a harness bug): %v%s", v, r.keepLog(t))
	case !v.ok() && !s.unsafe:
		t.Errorf("%s: %v%s", s.name, v, r.keepLog(t))
	case v.acquisitions == 0:
		t.Errorf("%s: no acquisition at all: the scenario proves nothing; errors: %v", s.name, row.samples)
	case v.lost < s.minLost:
		t.Errorf("%s: %d holders told of loss, want at least %d: the fault missed the holders", s.name, v.lost, s.minLost)
	case row.perWait/float64(s.target.nodes()) > maxAttemptsPerWait:
		t.Errorf("%s: %.1f acquire script calls per wait on %d node(s): a busy loop", s.name, row.perWait, s.target.nodes())
	case row.calls < int64(v.acquisitions):
		t.Errorf("%s: %d acquire script calls seen for %d acquisitions: the hook does not see the script (hash %s)", s.name, row.calls, v.acquisitions, sha)
	}
	return row
}

// firstToken grants the name once and releases it, from a Client with
// the restart quarantine off, just before the workers start. The name
// then has a fencing token, as it has on a server long in use, and the
// workers' quarantine (a server younger than it grants nothing on a name
// without one) holds them back only after a restart that forgot it:
// without this every scenario would start with a TTL of refusals on its
// fresh servers. It allows eviction: the scenario's workers decide
// whether an evicting server is refused.
func (r *run) firstToken(t *testing.T) {
	t.Helper()
	rdb, nodes := workerConfig{Addrs: r.target.addrs, Redlock: r.target.redlock, SentinelMaster: r.target.sentinelMaster, Cluster: r.target.cluster}.redisClients()
	var c *limiter.Client
	var err error
	if r.target.redlock {
		defer closeAll(nodes)
		c, err = limiter.NewRedlock(nodes, limiter.RestartQuarantine(0))
	} else {
		defer rdb.Close()
		c, err = limiter.New(rdb, limiter.RestartQuarantine(0), limiter.AllowEviction())
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	defer c.Close(ctx)
	sem, err := c.Semaphore(r.semName(), r.limit)
	if err != nil {
		t.Fatal(err)
	}
	l, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("the first grant of %s: %v", r.semName(), err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// keepLog writes the whole log to a file that outlives the test, for the
// failure message.
func (r *run) keepLog(t *testing.T) string {
	lines, err := r.obs.rdb.LRange(context.Background(), r.obs.keys.Log, 0, -1).Result()
	if err != nil {
		return "\n(log not kept: " + err.Error() + ")"
	}
	name := filepath.Join(os.TempDir(), fmt.Sprintf("torture-%s-%d.log", r.name, time.Now().UnixNano()))
	if err := os.WriteFile(name, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return "\n(log not kept: " + err.Error() + ")"
	}
	return "\nthe log (G proc lease weight token attempt-seq hold-ms seq µs; R|L proc lease seq µs; K proc seq µs): " + name
}

func (r *run) startWorker(t *testing.T, i int, cfg workerConfig) *proc {
	t.Helper()
	conf, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: exec.Command(os.Args[0], "-test.run=^$"), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), redistest.ChildEnv+"="+workerRole, configEnv+"="+string(conf))
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("worker %d: %v", i, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitReady waits until every worker has made its Client and semaphores.
func (r *run) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := r.obs.rdb.Get(context.Background(), r.obs.keys.Ready).Int()
		if err == nil && n == len(r.procs) {
			return
		}
		for i, p := range r.procs {
			select {
			case <-p.done:
				t.Fatalf("worker %d ended before it started: %v\n%s", i, p.cmd.ProcessState, p.err.String())
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d workers ready after a minute", n, len(r.procs))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitEnd waits for the workers to finish their holds and close, and
// returns their reports (none from a killed worker).
func (r *run) waitEnd(t *testing.T) []workerResult {
	t.Helper()
	var out []workerResult
	timeout := time.After(time.Minute)
	for i, p := range r.procs {
		select {
		case <-p.done:
		case <-timeout:
			t.Fatalf("worker %d still running a minute after stop\n%s", i, p.err.String())
		}
		if p.killed {
			continue
		}
		if !p.cmd.ProcessState.Success() {
			t.Fatalf("worker %d: %v\n%s", i, p.cmd.ProcessState, tail(p.err.String()))
		}
		res, err := parseResult(p.out.String())
		if err != nil {
			t.Fatalf("worker %d: %v\n%s", i, err, tail(p.err.String()))
		}
		out = append(out, res)
	}
	return out
}

func parseResult(out string) (workerResult, error) {
	var res workerResult
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), resultMark); ok {
			return res, json.Unmarshal([]byte(line), &res)
		}
	}
	return res, fmt.Errorf("no result line in %q", tail(out))
}

func tail(s string) string {
	const n = 4000
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// kill ends worker i with SIGKILL mid-run and logs its death once it is
// reaped: from then on it holds nothing.
func (r *run) kill(t *testing.T, i int) {
	t.Helper()
	p := r.procs[i]
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done
	p.killed = true
	if err := r.obs.kill(context.Background(), i); err != nil {
		t.Fatal(err)
	}
}

// follow reads the log written since the last call and keeps track of
// the leases held; it returns the open ones.
func (r *run) follow(t *testing.T) map[string]record {
	t.Helper()
	recs, err := r.obs.read(context.Background(), r.seen)
	if err != nil {
		t.Fatal(err)
	}
	r.seen += int64(len(recs))
	for _, rec := range recs {
		switch rec.kind {
		case 'G':
			r.open[rec.lease] = rec
		case 'R', 'L':
			delete(r.open, rec.lease)
		case 'K':
			for id, g := range r.open {
				if g.proc == rec.proc {
					delete(r.open, id)
				}
			}
		}
	}
	return r.open
}

// waitHolding waits until some lease the log shows held satisfies ok,
// and returns it; it fails the test after 20s.
func (r *run) waitHolding(t *testing.T, what string, ok func(g record) bool) record {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, g := range r.follow(t) {
			if ok(g) {
				return g
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no holder %s within 20s", what)
	return record{}
}

// waitOutlasting waits until a holder means to hold for d more, so that
// a fault of d that keeps its lease from being refreshed certainly ends
// it while it is held: its holder must be told.
func (r *run) waitOutlasting(t *testing.T, d time.Duration) {
	t.Helper()
	r.waitHolding(t, "outlasting "+d.String(), func(g record) bool {
		// g.at is when the grant was logged, just before its hold began.
		return time.UnixMicro(g.at).Add(g.hold).After(time.Now().Add(d + 100*time.Millisecond))
	})
}

func (r *run) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// waitGrantAfter waits for the first grant logged after at, and returns
// it; it fails the test after 20s.
func (r *run) waitGrantAfter(t *testing.T, at time.Time) record {
	t.Helper()
	var seen int64
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		recs, err := r.obs.read(context.Background(), seen)
		if err != nil {
			t.Fatal(err)
		}
		seen += int64(len(recs))
		for _, g := range recs {
			if g.kind == 'G' && time.UnixMicro(g.at).After(at) {
				return g
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no grant within 20s of %v", at)
	return record{}
}
