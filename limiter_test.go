// The whole story end to end, with separate OS processes: two scheduler
// processes and two asynq worker processes (re-runs of this test binary)
// share one Redis; a job fires every second and its handler takes 2.5s.
package redsem_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
	"github.com/redsem/redsem/scheduler"
)

const (
	jobName   = "e2e-export"
	workerTTL = 2 * time.Second
	handler   = 2500 * time.Millisecond
)

// TestMain runs the test binary as one of the child processes (see
// start) when redistest.ChildEnv names it; otherwise it runs the tests.
func TestMain(m *testing.M) {
	redistest.Children(map[string]func() int{"scheduler": child(schedulerProcess), "worker": child(workerProcess)})
	os.Exit(m.Run())
}

// child is the main of a child process: fn with the Redis address and
// name that start gave it. Each makes its own limiter Client and, on
// SIGTERM, stops and closes it before exiting; an error exits with code 1.
func child(fn func(addr, name string) error) func() int {
	return func() int {
		if err := fn(os.Getenv("REDSEM_E2E_ADDR"), os.Getenv("REDSEM_E2E_NAME")); err != nil {
			fmt.Println(err)
			return 1
		}
		return 0
	}
}

// withLimiter runs fn with a limiter Client of a new go-redis client to
// addr, then closes the Client (after fn returned) and the go-redis client.
func withLimiter(addr string, fn func(rdb *redis.Client, lc *limiter.Client) error) (err error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	lc, err := limiter.New(rdb, limiter.RestartQuarantine(0))
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if cerr := lc.Close(ctx); cerr != nil && err == nil {
			err = fmt.Errorf("limiter Client.Close: %w", cerr)
		}
	}()
	return fn(rdb, lc)
}

func schedulerProcess(addr, _ string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return withLimiter(addr, func(_ *redis.Client, lc *limiter.Client) error {
		client := asynq.NewClient(asynq.RedisClientOpt{Addr: addr})
		defer client.Close()
		s, err := scheduler.New(lc, client)
		if err != nil {
			return err
		}
		err = s.Register(scheduler.Job{Name: jobName, Spec: "* * * * * *", TaskType: "export", TTL: 5 * time.Second,
			Options: []asynq.Option{asynq.MaxRetry(0), asynq.Retention(time.Hour)}})
		if err != nil {
			return err
		}
		s.Start()
		<-ctx.Done() // until SIGTERM (or killed)
		<-s.Stop().Done()
		return nil
	})
}

// beginRun counts a run of the job in e2e:running and says which worker
// (ARGV[1]) runs which tick (ARGV[2]), at once: the test reads the three
// together. It returns the runs in progress.
var beginRun = redis.NewScript(`
local n = redis.call('INCR', 'e2e:running')
redis.call('MSET', 'e2e:running-on', ARGV[1], 'e2e:running-id', ARGV[2])
return n`)

// endRun counts the run of tick ARGV[1] as ended, once: by its handler,
// or by the test for a handler it killed, whichever comes first (the
// victim may have finished just before the kill).
var endRun = redis.NewScript(`
if redis.call('SET', 'e2e:ended:' .. ARGV[1], ARGV[2], 'NX') then return redis.call('DECR', 'e2e:running') end
return false`)

// workerProcess's handler records, in Redis and independently of the
// library, how many runs of the job overlap and which ticks ran.
func workerProcess(addr, name string) error {
	return withLimiter(addr, func(rdb *redis.Client, lc *limiter.Client) error {
		adopt, err := scheduler.Adopt(lc, scheduler.WorkerTTL(workerTTL))
		if err != nil {
			return err
		}
		srv := asynq.NewServer(asynq.RedisClientOpt{Addr: addr}, asynq.Config{Concurrency: 2, LogLevel: asynq.FatalLevel})
		// Run returns after SIGTERM, once the server has shut down.
		return srv.Run(adopt(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			bg := context.Background()
			id, _ := asynq.GetTaskID(ctx)
			if t.Type() == "late" {
				rdb.Set(bg, "e2e:late-ran", id, 0)
				return nil
			}
			if n, _ := beginRun.Run(bg, rdb, nil, name, id).Int(); n > 1 {
				rdb.Incr(bg, "e2e:overlaps")
			}
			rdb.Incr(bg, "e2e:ran:"+id) // >1 would be a tick run twice
			rdb.RPush(bg, "e2e:runs", name+" "+id)
			select {
			case <-time.After(handler):
			case <-ctx.Done():
			}
			endRun.Run(bg, rdb, nil, id, "done")
			return nil
		})))
	})
}

// start runs a child process, ended at cleanup with SIGTERM (or SIGKILL
// if it has not exited after 15s); a child that exits with an error (code
// 1: e.g. its limiter Client's Close failed) fails the test.
func start(t *testing.T, addr, role, name string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), redistest.ChildEnv+"="+role, "REDSEM_E2E_ADDR="+addr, "REDSEM_E2E_NAME="+name)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if code := cmd.ProcessState.ExitCode(); code > 0 {
			t.Errorf("%s %s exited with code %d", role, name, code)
		}
	})
	return cmd
}

func TestSchedulerToWorkerEndToEnd(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx := context.Background()

	// A task whose ticket expires before any worker is up is skipped.
	lc := redistest.Limiter(t, rdb) // closed before rdb, after the children stopped
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	s, err := scheduler.New(lc, client)
	if err != nil {
		t.Fatal(err)
	}
	late, err := s.Enqueue(ctx, scheduler.Job{Name: "late", TaskType: "late", TTL: 200 * time.Millisecond,
		Options: []asynq.Option{asynq.Retention(time.Hour)}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)

	workers := map[string]*exec.Cmd{"w1": start(t, srv.Addr(), "worker", "w1"), "w2": start(t, srv.Addr(), "worker", "w2")}
	schedulers := []*exec.Cmd{start(t, srv.Addr(), "scheduler", "s1"), start(t, srv.Addr(), "scheduler", "s2")}
	locks := inspect.New(lc) // what Redis holds of the job's lock

	// Kill -9 whichever worker runs the job about 4s in.
	time.Sleep(4 * time.Second)
	var victim, victimRun string
	redistest.Eventually(t, 10*time.Second, "a run is in progress", func() bool {
		on := rdb.MGet(ctx, "e2e:running", "e2e:running-on", "e2e:running-id").Val()
		if len(on) != 3 {
			return false
		}
		victim, _ = on[1].(string)
		victimRun, _ = on[2].(string)
		return on[0] == "1" && victim != ""
	})
	runsBefore := rdb.LLen(ctx, "e2e:runs").Val()
	held, err := locks.Holders(ctx, jobName)
	if err != nil || len(held) != 1 {
		t.Fatalf("holders during a run: %+v, %v", held, err)
	}
	if err := workers[victim].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Its handler will never say it stopped, unless it did just before.
	endRun.Run(ctx, rdb, nil, victimRun, "killed")
	redistest.Eventually(t, 10*time.Second, "the killed worker's lease expires", func() bool {
		hs, _ := locks.Holders(ctx, jobName)
		return len(hs) == 0 || hs[0].ID != held[0].ID
	})
	if freed := time.Since(killed); freed > workerTTL+time.Second {
		t.Fatalf("lock freed %v after the kill; worker TTL %v", freed, workerTTL)
	}
	redistest.Eventually(t, 10*time.Second, "the next tick runs on the surviving worker", func() bool {
		return rdb.LLen(ctx, "e2e:runs").Val() > runsBefore
	})

	time.Sleep(6 * time.Second) // ~10s of schedule in all
	for _, s := range schedulers {
		_ = s.Process.Signal(syscall.SIGTERM) // it stops and closes its limiter Client
	}
	// Let the last runs finish, then check the invariants.
	redistest.Eventually(t, 10*time.Second, "runs finish", func() bool { return rdb.Get(ctx, "e2e:running").Val() == "0" })

	if n, _ := rdb.Get(ctx, "e2e:overlaps").Int(); n != 0 {
		t.Fatalf("%d runs of the job overlapped", n)
	}
	runs := rdb.LRange(ctx, "e2e:runs", 0, -1).Val()
	if len(runs) < 3 {
		t.Fatalf("only %d runs in ~10s: %v", len(runs), runs)
	}
	for _, r := range runs {
		id := strings.Fields(r)[1]
		if n, _ := strconv.Atoi(rdb.Get(ctx, "e2e:ran:"+id).Val()); n != 1 {
			t.Fatalf("tick %s ran %d times", id, n)
		}
	}
	if v := rdb.Get(ctx, "e2e:late-ran").Val(); v != "" {
		t.Fatalf("the task whose lock expired before pick-up ran (%s)", v)
	}
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer insp.Close()
	if info, err := insp.GetTaskInfo("default", late.ID); err != nil || info.State != asynq.TaskStateArchived {
		t.Fatalf("late task: %+v, %v; want archived (skipped)", info, err)
	}
	// Every adopted lease was released (the killed one expired). A tick
	// enqueued just before the schedulers stopped may still be running.
	redistest.Eventually(t, 10*time.Second, "every lease released", func() bool {
		hs, _ := locks.Holders(ctx, jobName)
		return len(hs) == 0 && rdb.Get(ctx, "e2e:running").Val() == "0"
	})
	t.Logf("%d runs by 2 workers from 2 schedulers; %s killed mid-run, lock back after TTL", len(runs), victim)
}
