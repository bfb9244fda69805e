package redistest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestServerSetGet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := StartServer(t).Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k = %q, %v", v, err)
	}
}

func TestServerExtraArgs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := StartServer(t, "--maxmemory", "12mb").Client(t)
	cfg, err := c.ConfigGet(ctx, "maxmemory").Result()
	if err != nil {
		t.Fatal(err)
	}
	if cfg["maxmemory"] != "12582912" {
		t.Fatalf("maxmemory = %q", cfg["maxmemory"])
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := StartServer(t)
	c := s.Client(t, func(o *redis.Options) {
		o.ReadTimeout = 200 * time.Millisecond
		o.MaxRetries = -1
	})
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	s.Pause(t)
	start := time.Now()
	err := c.Ping(ctx).Err()
	var netErr interface{ Timeout() bool }
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Fatalf("PING on paused server: want timeout, got %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("timeout took %v", d)
	}

	s.Resume(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

// Stop kills a paused server and may be called again; a server its test
// left paused is killed, and reaped, by the test's cleanup.
func TestStopIdempotentAndPausedCleanup(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	s.Pause(t) // cleanup must still kill it without hanging
	s.Stop(t)
	s.Stop(t)
	if _, err := s.command(200*time.Millisecond, "PING"); err == nil {
		t.Fatal("PING succeeded after Stop")
	}
	var pid int
	t.Run("left paused", func(t *testing.T) {
		s2 := StartServer(t)
		s2.Pause(t) // left paused: t.Cleanup must kill it
		pid = s2.proc.cmd.Process.Pid
	})
	// The subtest's cleanups have run.
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the server left paused (pid %d) outlived its test's cleanup: kill -0 says %v, want ESRCH", pid, err)
	}
}

func TestRestartIsEmptyOnSameAddr(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := StartServer(t)
	addr := s.Addr()
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Even an explicit save must not survive a restart.
	if err := c.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart(t)
	if s.Addr() != addr {
		t.Fatalf("Addr changed: %s -> %s", addr, s.Addr())
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Restart: want redis.Nil, got %v", err)
	}

	// Restart from stopped and from paused also works.
	s.Stop(t)
	s.Restart(t)
	s.Pause(t)
	s.Restart(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestCommandCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := StartServer(t)
	c := s.Client(t)
	if err := c.Ping(ctx).Err(); err != nil { // connect first: handshake not counted below
		t.Fatal(err)
	}
	before := s.CommandCalls(t)
	for i := 0; i < 5; i++ {
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Do(ctx, "CLUSTER", "INFO").Err(); err == nil {
		t.Fatal("CLUSTER INFO succeeded on a non-cluster server")
	}
	after := s.CommandCalls(t)
	if d := after["ping"] - before["ping"]; d != 5 {
		t.Fatalf("ping calls grew by %d, want 5 (before %v, after %v)", d, before, after)
	}
	if d := after["info"] - before["info"]; d != 1 {
		t.Fatalf("info calls grew by %d, want 1", d)
	}

	s.ResetStats(t)
	if n := s.CommandCalls(t)["ping"]; n != 0 {
		t.Fatalf("ping calls after ResetStats = %d", n)
	}
}

func TestParseCommandStats(t *testing.T) {
	t.Parallel()
	got, err := parseCommandStats("# Commandstats\r\n" +
		"cmdstat_evalsha:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=1\r\n" +
		"cmdstat_cluster|info:calls=2,usec=3,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n")
	if err != nil {
		t.Fatal(err)
	}
	if got["evalsha"] != 7 || got["cluster|info"] != 2 || len(got) != 2 {
		t.Fatalf("got %v", got)
	}
	if _, err := parseCommandStats("cmdstat_x:usec=1"); err == nil {
		t.Fatal("want error for line without calls=")
	}
}

func TestStartNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nodes := StartNodes(t, 3)
	seen := map[string]bool{}
	for i, n := range nodes {
		if seen[n.Addr()] {
			t.Fatalf("duplicate addr %s", n.Addr())
		}
		seen[n.Addr()] = true
		if err := n.Client(t).Set(ctx, "node", i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range nodes { // independent datasets
		if v, err := n.Client(t).Get(ctx, "node").Int(); err != nil || v != i {
			t.Fatalf("node %d: GET = %d, %v", i, v, err)
		}
	}
}

func TestKeySlotMatchesRedis(t *testing.T) {
	t.Parallel()
	s := StartServer(t, "--cluster-enabled", "yes")
	for _, key := range []string{"foo", "{user1000}.following", "{a}", "a{}b", "{k17}", "x{y}z{w}"} {
		reply, err := s.command(time.Second, "CLUSTER", "KEYSLOT", key)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprint(keySlot(key)); reply != want {
			t.Errorf("keySlot(%q) = %s, Redis says %s", key, want, reply)
		}
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := StartCluster(t, 3)
	if len(cl.Servers()) != 3 || len(cl.Addrs()) != 3 {
		t.Fatalf("servers %d, addrs %d", len(cl.Servers()), len(cl.Addrs()))
	}
	cc := cl.Client(t)
	before := cl.CommandCalls(t)

	slots := map[int]bool{}
	for i := 0; i < 50; i++ {
		key := fmt.Sprintf("{%c%d}", 'a'+i%26, i)
		slots[keySlot(key)/(slotCount/3+1)] = true
		if err := cc.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
	}
	for i := 0; i < 50; i++ {
		key := fmt.Sprintf("{%c%d}", 'a'+i%26, i)
		if v, err := cc.Get(ctx, key).Int(); err != nil || v != i {
			t.Fatalf("GET %s = %d, %v", key, v, err)
		}
	}
	if len(slots) != 3 {
		t.Fatalf("keys hit %d of 3 slot thirds", len(slots))
	}

	after := cl.CommandCalls(t)
	if d := after["set"] - before["set"]; d != 50 {
		t.Fatalf("set calls grew by %d, want 50", d)
	}
	if d := after["get"] - before["get"]; d != 50 {
		t.Fatalf("get calls grew by %d, want 50", d)
	}
	perNode := 0
	for _, s := range cl.Servers() {
		if s.CommandCalls(t)["set"] > 0 {
			perNode++
		}
	}
	if perNode != 3 {
		t.Fatalf("SETs reached %d of 3 masters", perNode)
	}

	cl.ResetStats(t)
	if n := cl.CommandCalls(t)["set"]; n != 0 {
		t.Fatalf("set calls after ResetStats = %d", n)
	}
}

// fatalRecorder captures Fatal/Skip calls so the missing-binary path can be
// checked without failing the real test.
type fatalRecorder struct {
	testing.TB
	msg     string
	skipped bool
}

func (f *fatalRecorder) Fatal(args ...any) { f.msg = fmt.Sprint(args...); runtime.Goexit() }
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fatalRecorder) Skip(...any)          { f.skipped = true; runtime.Goexit() }
func (f *fatalRecorder) Skipf(string, ...any) { f.skipped = true; runtime.Goexit() }
func (f *fatalRecorder) SkipNow()             { f.skipped = true; runtime.Goexit() }

func TestMissingRedisFailsWithHint(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no redis-server here
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartServer(rec)
	}()
	<-done
	if rec.skipped || !strings.Contains(rec.msg, InstallHint) {
		t.Fatalf("want Fatal(InstallHint), got skipped=%v msg=%q", rec.skipped, rec.msg)
	}
}
