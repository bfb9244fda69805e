package limiter_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// usePeriodForTests makes records of the limits in use expire within
// 1.5s, in the test and in its children.
const usePeriodForTests = 500 * time.Millisecond

// runInUseChild holds a lease of REDSEM_NAME under REDSEM_LIMIT and
// reserves an event of its rate REDSEM_RATE, says "ready", and goes on
// asking its rate for an event every 100ms until killed: a process
// whose limits live only in its code.
func runInUseChild() int {
	limiter.SetUsePeriod(usePeriodForTests)
	rdb := childClient()
	defer rdb.Close()
	name := os.Getenv("REDSEM_NAME")
	limit, _ := strconv.ParseInt(os.Getenv("REDSEM_LIMIT"), 10, 64)
	rate, err := limiter.ParseRate(os.Getenv("REDSEM_RATE"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx := context.Background()
	client, err := limiter.New(rdb, limiter.RestartQuarantine(0))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer client.Close(ctx)
	sem, err := client.Semaphore(name, limit)
	if err == nil {
		_, err = sem.Acquire(ctx)
	}
	var rl *limiter.RateLimit
	if err == nil {
		rl, err = client.RateLimit(name, rate)
	}
	if err == nil {
		err = rl.Wait(ctx)
	}
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("ready")
	for {
		if _, err := rl.Allow(ctx); err != nil {
			fmt.Println("error", err)
			return 1
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startInUseChild starts a process using name at limit and rate, and
// returns it once it holds its lease.
func startInUseChild(t *testing.T, b backend, name string, limit int64, rate string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), b.env...)
	cmd.Env = append(cmd.Env, redistest.ChildEnv+"=inuse", "REDSEM_NAME="+name,
		"REDSEM_LIMIT="+strconv.FormatInt(limit, 10), "REDSEM_RATE="+rate)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("child: %q", line)
	}
	return cmd
}

// Processes that give one name different limits in their code show, in
// the Inspector, each limit with how many processes apply it, and the
// rate they share; a process killed -9 drops out at its records' expiry.
func TestInUseAcrossProcesses(t *testing.T) {
	t.Parallel()
	old := limiter.SetUsePeriod(usePeriodForTests)
	defer limiter.SetUsePeriod(old)
	forEachBackend(t, func(t *testing.T, b backend) {
		name := uniqueName(b, "inuse")
		startInUseChild(t, b, name, 5, "18/1s burst 1")
		startInUseChild(t, b, name, 5, "18/1s burst 1")
		odd := startInUseChild(t, b, name, 4, "18/1s burst 1")
		in := inspect.New(clientFor(t, b.client(t)))
		rate := limiter.Rate{Events: 18, Per: time.Second, Burst: 1}
		want := inspect.InUse{
			Limits: []inspect.LimitInUse{{Limit: 5, Processes: 2}, {Limit: 4, Processes: 1}},
			Rates:  []inspect.RateInUse{{Rate: rate, Processes: 3}},
		}
		waitInUse(t, in, name, want)
		if err := odd.Process.Kill(); err != nil { // SIGKILL: no Close
			t.Fatal(err)
		}
		want.Limits = want.Limits[:1]
		want.Rates[0].Processes = 2
		waitInUse(t, in, name, want)
	})
}

// waitInUse waits, up to the records' expiry and a bit, for the
// Inspector to read want for name.
func waitInUse(t *testing.T, in *inspect.Inspector, name string, want inspect.InUse) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	deadline := time.Now().Add(3*usePeriodForTests + 3*time.Second)
	var got inspect.InUse
	var err error
	for time.Now().Before(deadline) {
		if got, err = in.InUse(ctx, name); err == nil && reflect.DeepEqual(got, want) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("InUse(%q) = %+v, %v; want %+v", name, got, err, want)
}
