package limiter_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// runWhyChild acquires REDSEM_NAME (limit REDSEM_LIMIT) from REDSEM_N
// goroutines (started REDSEM_STAGGER apart) in a loop, holding each lease
// REDSEM_HOLD (0: for ever), and
// prints "granted <lease id> <unix ns>" at each grant, until killed.
func runWhyChild() int {
	rdb := childClient()
	defer rdb.Close()
	limit, _ := strconv.ParseInt(os.Getenv("REDSEM_LIMIT"), 10, 64)
	n, _ := strconv.Atoi(os.Getenv("REDSEM_N"))
	hold, _ := time.ParseDuration(os.Getenv("REDSEM_HOLD"))
	q, _ := time.ParseDuration(os.Getenv("REDSEM_QUARANTINE"))
	stagger, _ := time.ParseDuration(os.Getenv("REDSEM_STAGGER"))
	ctx := context.Background()
	client, err := limiter.New(rdb, limiter.RestartQuarantine(q), limiter.AcquireTimeout(0))
	if err == nil {
		defer client.Close(ctx)
	}
	var sem *limiter.Semaphore
	if err == nil {
		sem, err = client.Semaphore(os.Getenv("REDSEM_NAME"), limit)
	}
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	var mu sync.Mutex
	for k := range n {
		go func() {
			time.Sleep(time.Duration(k) * stagger)
			for {
				l, err := sem.Acquire(ctx)
				mu.Lock()
				if err != nil {
					fmt.Println("error", err)
				} else {
					fmt.Println("granted", l.ID(), time.Now().UnixNano())
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				if hold == 0 {
					select {}
				}
				time.Sleep(hold)
				_ = l.Release(ctx)
			}
		}()
	}
	select {}
}

// grants is what whyChild processes print: each lease id's grant time.
type grants struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (g *grants) get(id string) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.at[id]
	return t, ok
}

// startWhyChild starts a runWhyChild process whose grants land in g.
// Its goroutines start stagger apart.
func startWhyChild(t testing.TB, b backend, g *grants, name string, limit int64, n int, hold, quarantine, stagger time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), b.env...)
	cmd.Env = append(cmd.Env, redistest.ChildEnv+"=why", "REDSEM_NAME="+name, "REDSEM_LIMIT="+strconv.FormatInt(limit, 10),
		"REDSEM_N="+strconv.Itoa(n), "REDSEM_HOLD="+hold.String(), "REDSEM_QUARANTINE="+quarantine.String(), "REDSEM_STAGGER="+stagger.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 3 && f[0] == "granted" {
				ns, _ := strconv.ParseInt(f[2], 10, 64)
				g.mu.Lock()
				g.at[f[1]] = time.Unix(0, ns)
				g.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); <-done })
}

func newGrants() *grants { return &grants{at: map[string]time.Time{}} }

// waitersOf waits until name has n waiters and returns them.
func waitersOf(t testing.TB, in *inspect.Inspector, name string, n int) []inspect.Waiter {
	t.Helper()
	var ws []inspect.Waiter
	redistest.Eventually(t, 20*time.Second, fmt.Sprintf("%d waiters", n), func() bool {
		var err error
		ws, err = in.Waiters(context.Background(), name)
		return err == nil && len(ws) == n
	})
	return ws
}

// A full semaphore, held by one process and waited on by another, says
// "full" with the waiters ahead of each; a fleet limit lowered below the
// limit the processes use says "fleet-limit" where the processes' own
// limit would grant; a new request behind them says so too.
func TestWhyFullAndFleetLimitAcrossProcesses(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 60*time.Second)
	name := uniqueName(b, "whyfull")
	in := inspect.New(clientFor(t, b.client(t)))
	g := newGrants()
	startWhyChild(t, b, g, name, 2, 2, 0, 0, 0)
	redistest.Eventually(t, 20*time.Second, "2 holders", func() bool {
		hs, _ := in.Holders(ctx, name)
		return len(hs) == 2
	})
	startWhyChild(t, b, g, name, 2, 3, 0, 0, 0)
	ws := waitersOf(t, in, name, 3)
	for j, w := range ws {
		if w.Why.Reason != limiter.ReasonFull || w.Why.Ahead != j || w.Why.InUse != 2 || w.Why.Limit != 2 || !w.Why.Estimated || w.Why.ETA <= 0 {
			t.Fatalf("waiter %d of a full semaphore: %+v, want full with %d ahead, 2 of 2 in use, an estimated ETA", j, w.Why, j)
		}
		if j > 0 && w.Why.ETA < ws[j-1].Why.ETA {
			t.Fatalf("waiter %d's ETA %v before the one ahead's %v", j, w.Why.ETA, ws[j-1].Why.ETA)
		}
		one, err := in.Why(ctx, name, w.ID)
		if err != nil || one.Reason != limiter.ReasonFull || one.Ahead != j {
			t.Fatalf("Why(%s): %+v %v", w.ID, one, err)
		}
	}
	if w, err := in.Why(ctx, name, ""); err != nil || w.Reason != limiter.ReasonFull || w.Ahead != 3 {
		t.Fatalf("Why for a new request behind 3 waiters: %+v %v", w, err)
	}
	if _, err := in.Why(ctx, name, "nobody"); err == nil {
		t.Fatal("Why of an id not waiting: no error")
	}

	// The processes use 5; a fleet limit of 2 keeps out waiters that 5 would let in.
	name5 := uniqueName(b, "whyfleet")
	if err := in.SetLimit(ctx, name5, 2); err != nil {
		t.Fatal(err)
	}
	startWhyChild(t, b, g, name5, 5, 2, 0, 0, 0)
	redistest.Eventually(t, 20*time.Second, "2 holders", func() bool {
		hs, _ := in.Holders(ctx, name5)
		return len(hs) == 2
	})
	startWhyChild(t, b, g, name5, 5, 4, 0, 0, 0)
	ws = waitersOf(t, in, name5, 4)
	for j, w := range ws {
		want := limiter.ReasonFleetLimit
		if j == 3 { // 2 held + 3 ahead + 1 > 5: its own limit would keep it out too
			want = limiter.ReasonFull
		}
		if w.Why.Reason != want || w.Why.Limit != 2 {
			t.Fatalf("waiter %d under a fleet limit 2 of processes using 5: %+v, want %q", j, w.Why, want)
		}
	}
}

// A pause set while processes wait says "paused" for each waiter, with
// the pause's end as an exact ETA for the head; after the pause the head
// is granted then.
func TestWhyPausedAcrossProcesses(t *testing.T) {
	t.Parallel() // seconds of waiting: beside the other slow ones
	b := singleBackend(t)
	ctx := ctxT(t, 60*time.Second)
	name := uniqueName(b, "whypause")
	in := inspect.New(clientFor(t, b.client(t)))
	const pause = 3 * time.Second
	if _, err := in.Pause(ctx, name, pause); err != nil {
		t.Fatal(err)
	}
	g := newGrants()
	startWhyChild(t, b, g, name, 1, 1, time.Hour, 0, 0)
	startWhyChild(t, b, g, name, 1, 1, time.Hour, 0, 0)
	ws := waitersOf(t, in, name, 2)
	read := time.Now()
	for _, w := range ws {
		if w.Why.Reason != limiter.ReasonPaused {
			t.Fatalf("a waiter of a paused name: %+v", w.Why)
		}
	}
	head := ws[0].Why
	if head.Estimated || head.ETA <= 0 || head.ETA > pause {
		t.Fatalf("the head of a paused queue: %+v, want an exact ETA within the pause %v", head, pause)
	}
	redistest.Eventually(t, 10*time.Second, "the head granted", func() bool { _, ok := g.get(ws[0].ID); return ok })
	at, _ := g.get(ws[0].ID)
	if err := at.Sub(read.Add(head.ETA)); err < -50*time.Millisecond || err > 500*time.Millisecond {
		t.Fatalf("the head was granted %v from its ETA", err)
	}
}

// Waiters in several processes on a Redis that just started wait out the
// restart quarantine: "quarantine", with its end as an exact ETA.
func TestWhyQuarantineAcrossProcesses(t *testing.T) {
	t.Parallel() // seconds of waiting: beside the other slow ones
	b := singleBackend(t)
	name := uniqueName(b, "whyq")
	const q = 6 * time.Second
	in := inspect.New(clientFor(t, b.client(t), limiter.RestartQuarantine(q)))
	g := newGrants()
	startWhyChild(t, b, g, name, 1, 1, time.Hour, q, 0)
	startWhyChild(t, b, g, name, 1, 1, time.Hour, q, 0)
	ws := waitersOf(t, in, name, 2)
	read := time.Now()
	for _, w := range ws {
		if w.Why.Reason != limiter.ReasonQuarantine {
			t.Fatalf("a waiter in the restart quarantine: %+v", w.Why)
		}
	}
	head := ws[0].Why
	if head.Estimated || head.ETA <= 0 || head.ETA > q {
		t.Fatalf("the head in the quarantine: %+v, want an exact ETA within %v", head, q)
	}
	redistest.Eventually(t, 15*time.Second, "the head granted", func() bool { _, ok := g.get(ws[0].ID); return ok })
	at, _ := g.get(ws[0].ID)
	if err := at.Sub(read.Add(head.ETA)); err < -50*time.Millisecond || err > 500*time.Millisecond {
		t.Fatalf("the head was granted %v from its ETA", err)
	}
}

// A request about to wait on a name whose rate is spent by other
// processes says "rate", with the next slot as an exact ETA.
func TestWhyRateAcrossProcesses(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 60*time.Second)
	name := uniqueName(b, "whyrate")
	in := inspect.New(clientFor(t, b.client(t)))
	startRaters(t, b, name, "2/s", 2, 2, time.Now().Add(3*time.Second))
	var why inspect.Why
	redistest.Eventually(t, 10*time.Second, "a rate wait", func() bool {
		var err error
		why, err = in.Why(ctx, name, "")
		return err == nil && why.Reason == limiter.ReasonRate
	})
	if why.Estimated || why.ETA <= 0 || why.ETA > 3*time.Second {
		t.Fatalf("a new event on a spent rate: %+v", why)
	}
}
