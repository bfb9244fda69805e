package torture

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter/inspect"
)

// inspector returns the parent's own Inspector of a single node, to watch
// what Redis holds.
func inspector(t *testing.T, srv *redistest.Server) *inspect.Inspector {
	t.Helper()
	return inspect.New(redistest.Limiter(t, srv.Client(t)))
}

// A worker killed -9 mid-hold: its permits come back when its leases'
// TTLs run out, and its waiters leave the queue when their entries do.
func kill9(t *testing.T, sz size) {
	if sz.repeats >= sz.procs {
		t.Fatalf("%d kills need more than %d workers", sz.repeats, sz.procs)
	}
	srv := redistest.StartServer(t)
	var s spec
	s = weighted("kill-9", sz, single(srv), func(t *testing.T, r *run) {
		ins := inspector(t, srv)
		faults(sz, func(victim int) {
			g := r.waitHolding(t, fmt.Sprintf("in worker %d", victim), func(g record) bool {
				return g.proc == victim && g.hold >= 300*time.Millisecond
			})
			r.kill(t, victim)
			r.note("worker %d killed: %s", victim, permitsBack(t, ins, s.semName(), clientOf(g.lease)))
		})
	})
	addRow(runScenario(t, sz, s))
}

// clientOf is the limiter Client's part of a lease or wait id it made up
// (its random id, a dot, a sequence number).
func clientOf(id string) string { return id[:strings.LastIndexByte(id, '.')+1] }

// permitsBack watches Redis until no lease and no queue entry of the dead
// Client is left in the semaphore name, and says how long each took. The goal for leases is
// their TTL and a second; it is printed, not asserted (timing claims
// belong in benchmarks), but a lease that never goes fails the test.
func permitsBack(t *testing.T, ins *inspect.Inspector, name, dead string) string {
	t.Helper()
	start := time.Now()
	var leases, waiters time.Duration
	held := 0
	ctx := context.Background()
	for leases == 0 || waiters == 0 {
		if time.Since(start) > longestTTL+10*time.Second {
			t.Fatalf("the killed worker's leases or queue entries still in Redis %v later", time.Since(start))
		}
		hs, err := ins.Holders(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		ws, err := ins.Waiters(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, h := range hs {
			if strings.HasPrefix(h.ID, dead) {
				n += int(h.Weight)
			}
		}
		held = max(held, n)
		if n == 0 && leases == 0 {
			leases = time.Since(start)
		}
		if waiters == 0 && !anyWaiter(ws, dead) {
			waiters = time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	verdict := "ok"
	if leases > longestTTL+time.Second {
		verdict = "OVER"
	}
	return fmt.Sprintf("its %d permits back in %v (goal <= %v: %s), its waiters gone in %v",
		held, leases.Round(10*time.Millisecond), longestTTL+time.Second, verdict, waiters.Round(10*time.Millisecond))
}

func anyWaiter(ws []inspect.Waiter, client string) bool {
	for _, w := range ws {
		if strings.HasPrefix(w.ID, client) {
			return true
		}
	}
	return false
}
