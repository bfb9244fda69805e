package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// sentinelFlag puts redis-server in sentinel mode (after its config
	// file, which a sentinel must have and rewrites).
	sentinelFlag = "--sentinel"
	// failoverMasterName is the name the sentinel monitors the master by.
	failoverMasterName = "redistest"
	// failoverReadyTimeout bounds the start (replica in sync, sentinel
	// aware of it) and a failover: a few seconds on an idle machine, over
	// 20 s once on a loaded one (the sentinel skips a replica whose INFO
	// is stale, and INFOs it every second only once the master is down).
	failoverReadyTimeout = 60 * time.Second
)

// Failover is a master, one replica that replicates through a Proxy (so a
// test can hold replication back), and a sentinel watching them: the
// smallest deployment in which a failover can lose writes that were
// acknowledged to a client but not yet replicated.
type Failover struct {
	sentinel *Server
	link     *Proxy

	mu              sync.Mutex // guards master and replica, swapped by KillMaster
	master, replica *Server
}

// StartFailover starts the master, the replica (replicating through
// Link) and one sentinel with quorum 1, and returns once the replica is
// in sync and the sentinel knows it, so KillMaster can promote it. Like
// StartServer it fails (never skips) without Redis; everything is stopped
// at cleanup.
//
// The sentinel is quick: the master is down after 500 ms unanswered, and
// a failover takes a second or three. Two settings are large on purpose:
//   - the replica's repl-timeout (60 s) keeps its link to the master "up"
//     in its own eyes while Link is blackholed, so the sentinel still
//     deems it fit to promote (a replica cut off from its master for
//     long is skipped);
//   - the sentinel's failover-timeout (60 s) is also how long it leaves a
//     replica pointing at an address other than the master's before it
//     "fixes" it (+fix-slave-config): with 1 s the replica bypassed the
//     proxy 10 s into a test (at the sentinel's next INFO of it). So Link
//     holds for a test's first minute. A failover does not wait for it.
func StartFailover(t testing.TB) *Failover {
	t.Helper()
	// No delay before a diskless full sync: Redis waits 5 s by default
	// for more replicas to share it.
	syncNow := []string{"--repl-diskless-sync-delay", "0"}
	master := StartServer(t, syncNow...)
	link := StartProxy(t, master.Addr())
	host, port, _ := net.SplitHostPort(link.Addr())
	replica := StartServer(t, append(syncNow, "--replicaof", host, port, "--repl-timeout", "60")...)
	f := &Failover{link: link, master: master, replica: replica}

	ctx, cancel := context.WithTimeout(context.Background(), failoverReadyTimeout)
	defer cancel()
	poll(ctx, t, "replica "+replica.Addr()+" in sync", func() bool {
		info, err := replica.command(time.Second, "INFO", "replication")
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	if err := streaming(ctx, master.Addr()); err != nil {
		t.Fatalf("redistest: replica %s: %v", replica.Addr(), err)
	}

	// The sentinel starts after the sync, so the master's first INFO
	// already lists the replica. Its config file lives outside the
	// server's directory, which Restart empties.
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	mport := master.Addr()[strings.LastIndexByte(master.Addr(), ':')+1:]
	lines := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]s 1\n"+
		"sentinel down-after-milliseconds %[1]s 500\n"+
		"sentinel failover-timeout %[1]s 60000\n", failoverMasterName, mport)
	if err := os.WriteFile(conf, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	f.sentinel = startServer(t, false, []string{conf, sentinelFlag}, nil, nil)

	sc := f.sentinelClient()
	defer sc.Close()
	poll(ctx, t, "the sentinel sees replica "+replica.Addr(), func() bool {
		rs, _ := sc.Replicas(ctx, failoverMasterName).Result()
		for _, r := range rs {
			if net.JoinHostPort(r["ip"], r["port"]) == replica.Addr() && r["flags"] == "slave" && r["master-link-status"] == "ok" {
				return true
			}
		}
		return false
	})
	return f
}

// streaming returns once the replica acknowledges writes. After a
// diskless sync the master starts streaming commands only at the
// replica's first acknowledgement, which comes up to a second later:
// a WAIT in that second times out though the replica is "up". It PUBLISHes
// (propagated like a write, leaving no data) and WAITs on one connection,
// since WAIT counts the replicas that have that connection's writes.
func streaming(ctx context.Context, master string) error {
	conn, err := dial(master, nil, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	rd := bufio.NewReader(conn)
	for {
		if _, err := io.WriteString(conn, encode("PUBLISH", "redistest:ready", "")+encode("WAIT", "1", "100")); err != nil {
			return err
		}
		_, err := readReply(rd)
		acked := ""
		if err == nil {
			acked, err = readReply(rd)
		}
		switch {
		case err != nil:
			return fmt.Errorf("waiting for its acknowledgement: %w", err)
		case acked == "1":
			return nil
		}
	}
}

// poll checks cond every 20 ms until it holds, failing the test when ctx
// ends first.
func poll(ctx context.Context, t testing.TB, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("redistest: not within %v: %s", failoverReadyTimeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (f *Failover) sentinelClient() *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: f.sentinel.Addr(), MaxRetries: -1})
}

// MasterName is the name the sentinel knows the master by
// (FailoverOptions.MasterName).
func (f *Failover) MasterName() string { return failoverMasterName }

// SentinelAddrs are the sentinels' addresses (FailoverOptions.SentinelAddrs).
func (f *Failover) SentinelAddrs() []string { return []string{f.sentinel.Addr()} }

// Client returns a go-redis failover client (NewFailoverClient), which
// asks the sentinel for the master and follows a failover; opts may
// adjust its options first. It is closed at cleanup.
func (f *Failover) Client(t testing.TB, opts ...func(*redis.FailoverOptions)) *redis.Client {
	t.Helper()
	o := &redis.FailoverOptions{MasterName: f.MasterName(), SentinelAddrs: f.SentinelAddrs()}
	for _, fn := range opts {
		fn(o)
	}
	c := redis.NewFailoverClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Master is the current master: after KillMaster, the promoted replica.
func (f *Failover) Master() *Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.master
}

// Replica is the replica; after KillMaster, the killed master (stopped:
// a Restart brings it back empty, and the sentinel then makes it a
// replica of the new master, directly, not through Link).
func (f *Failover) Replica() *Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.replica
}

// Link is the proxy the replica replicates through: Blackhole holds
// replication back (both the stream and the replica's acknowledgements,
// so WAIT counts it out) while clients still reach the master. It leads
// to the first master, so after KillMaster nothing uses it.
func (f *Failover) Link() *Proxy { return f.link }

// KillMaster kills the master (SIGKILL: nothing more leaves it) and
// returns once the sentinel has promoted the replica, announces it as the
// master, and it accepts writes. Master and Replica then swap. Writes the
// replica had not received are lost, which is what tests of it are for.
func (f *Failover) KillMaster(t testing.TB) {
	t.Helper()
	f.mu.Lock()
	old, next := f.master, f.replica
	f.mu.Unlock()
	old.Stop(t)

	ctx, cancel := context.WithTimeout(context.Background(), failoverReadyTimeout)
	defer cancel()
	sc := f.sentinelClient()
	defer sc.Close()
	poll(ctx, t, "the sentinel promotes "+next.Addr(), func() bool {
		addr, err := sc.GetMasterAddrByName(ctx, failoverMasterName).Result()
		if err != nil || len(addr) != 2 || net.JoinHostPort(addr[0], addr[1]) != next.Addr() {
			return false
		}
		info, err := next.command(time.Second, "INFO", "replication")
		return err == nil && strings.Contains(info, "role:master")
	})
	f.mu.Lock()
	f.master, f.replica = next, old
	f.mu.Unlock()
}
