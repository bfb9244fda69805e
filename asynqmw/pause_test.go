package asynqmw_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

const pauseFor = 1500 * time.Millisecond

// pauseRules: a generous rate for partner: tasks, a limit alone for
// capped: tasks; their pauses are what the test watches.
var pauseRules = []asynqmw.Rule{
	{Name: "paused-api", TypePrefix: "partner:",
		Rate: limiter.Rate{Events: 100, Per: time.Second, Burst: 10}, AcquireTimeout: 3 * time.Second},
	{Name: "paused-cap", TypePrefix: "capped:", Limit: 4, AcquireTimeout: 3 * time.Second},
}

// pauseWorker is a child process of TestPauseAcrossProcesses: the first
// "429" call of each task type pauses its rule; every other call is
// stamped, in lists named after the type.
func pauseWorker() int {
	return childWorker(4, pauseRules, func(rdb *redis.Client) asynq.HandlerFunc {
		return func(ctx context.Context, t *asynq.Task) error {
			bg := context.Background()
			if string(t.Payload()) != "429" {
				stamp.Run(bg, rdb, []string{"starts:" + t.Type()})
				return nil
			}
			if first, _ := rdb.SetNX(bg, "tripped:"+t.Type(), 1, 0).Result(); first {
				stamp.Run(bg, rdb, []string{"paused-at:" + t.Type()})
				return asynqmw.Pause(pauseFor, errors.New("429 Too Many Requests"))
			}
			stamp.Run(bg, rdb, []string{"rerun-at:" + t.Type()})
			return nil
		}
	})
}

// A handler's PauseError in one worker process stops the rule in another
// (no call starts there before the pause ends, by the server's clock),
// whether the rule has a Rate or only a Limit, and its task comes back
// at the pause's end with no retry spent.
func TestPauseAcrossProcesses(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	startChildOn(t, "pause", srv.Addr(), "a")
	startChildOn(t, "pause", srv.Addr(), "b")
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	in := inspect.New(redistest.Limiter(t, rdb))
	insp := asynq.NewInspectorFromRedisClient(rdb)
	for _, tc := range []struct{ rule, task string }{{"paused-api", "partner:call"}, {"paused-cap", "capped:call"}} {
		tripper := enqueue(t, client, asynq.NewTask(tc.task, []byte("429")), asynq.Queue("a"), asynq.MaxRetry(3))
		redistest.Eventually(t, 10*time.Second, tc.rule+" is paused", func() bool {
			st, err := in.Rate(ctx, tc.rule)
			return err == nil && st.Paused > 0
		})
		const calls = 10
		for range calls {
			enqueue(t, client, asynq.NewTask(tc.task, nil), asynq.Queue("b"))
		}
		var ti *asynq.TaskInfo
		redistest.Eventually(t, 20*time.Second, tc.rule+": every call runs, and the paused task", func() bool {
			var err error
			ti, err = insp.GetTaskInfo("a", tripper.ID)
			return err == nil && ti.State == asynq.TaskStateCompleted && rdb.LLen(ctx, "starts:"+tc.task).Val() == calls
		})
		pausedAt := stamps(t, rdb, "paused-at:"+tc.task)[0]
		end := pausedAt + pauseFor.Microseconds()
		starts := stamps(t, rdb, "starts:"+tc.task)
		if early := time.Duration(end-starts[0]) * time.Microsecond; early > 0 {
			t.Fatalf("%s: the other process started a call %v before the pause ended", tc.rule, early)
		}
		rerun := stamps(t, rdb, "rerun-at:"+tc.task)[0]
		if rerun < end || ti.Retried != 0 {
			t.Fatalf("%s: the pausing task ran again %v after its pause began (pause %v), retried %d: want after the pause, no retry spent",
				tc.rule, time.Duration(rerun-pausedAt)*time.Microsecond, pauseFor, ti.Retried)
		}
		t.Logf("%s: other process's first call %v after the pause began; the pausing task again after %v", tc.rule,
			time.Duration(starts[0]-pausedAt)*time.Microsecond, time.Duration(rerun-pausedAt)*time.Microsecond)
	}
}

// Called directly: a PauseError pauses every rule of the task, with a
// Rate or only a Limit, counts it, and makes the task return a
// *BusyError (Paused) for the pause's end; the next task waits for the
// pause's end. A PauseError naming one Rule pauses that rule alone.
func TestPauseErrorPausesEveryRule(t *testing.T) {
	srv := redistest.StartServer(t)
	lc := redistest.Limiter(t, srv.Client(t))
	metrics := asynqmw.NewCollector()
	mw, err := asynqmw.New(lc, []asynqmw.Rule{
		{Name: "rated", Rate: limiter.Rate{Events: 100, Per: time.Second, Burst: 1}},
		{Name: "capped", Limit: 1},
		{Name: "named", TypePrefix: "n", Limit: 1},
	}, asynqmw.Metrics(metrics))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cause := errors.New("429")
	err = mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		return asynqmw.Pause(300*time.Millisecond, cause)
	})).ProcessTask(ctx, asynq.NewTask("t", nil))
	var busy *asynqmw.BusyError
	var pe *asynqmw.PauseError
	if !errors.As(err, &busy) || !busy.Paused || busy.Semaphore != "rated, capped" || !errors.As(err, &pe) || !errors.Is(err, cause) {
		t.Fatalf("got %v, want a *BusyError pausing rated and capped, wrapping the PauseError", err)
	}
	if busy.RetryIn < 290*time.Millisecond || busy.RetryIn > 300*time.Millisecond || asynqmw.IsFailure(nil)(err) {
		t.Fatalf("RetryIn %v (want the pause's 300ms), failure %v", busy.RetryIn, asynqmw.IsFailure(nil)(err))
	}
	in := inspect.New(lc)
	for _, name := range []string{"rated", "capped"} {
		if st, _ := in.Rate(ctx, name); st.Paused <= 0 {
			t.Fatalf("%s was not paused", name)
		}
		if n := metrics.Count(name, asynqmw.SeriesPausesSet); n != 1 {
			t.Fatalf("%s: %v pauses counted, want 1", name, n)
		}
	}
	if st, _ := in.Rate(ctx, "named"); st.Paused != 0 {
		t.Fatal("a rule that does not match the task was paused")
	}
	start := time.Now()
	if err := mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })).ProcessTask(ctx, asynq.NewTask("t", nil)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("the next task ran %v after the pause began (300ms)", took)
	}

	// Rule names one rule of the task: the others are not paused.
	err = mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		return &asynqmw.PauseError{For: time.Second, Rule: "named"}
	})).ProcessTask(ctx, asynq.NewTask("n", nil))
	if !errors.As(err, &busy) || !busy.Paused || busy.Semaphore != "named" {
		t.Fatalf("a PauseError naming its rule: %v, want a *BusyError pausing named alone", err)
	}
	for name, want := range map[string]bool{"named": true, "rated": false, "capped": false} {
		if st, _ := in.Rate(ctx, name); (st.Paused > 0) != want {
			t.Fatalf("after pausing named: %s paused for %v", name, st.Paused)
		}
	}
}

// A task whose wait for a permit runs out while its Limit-only rule is
// paused elsewhere is re-queued for the pause's end (Paused, RetryIn
// until then, spread up to 1½×), not after AcquireTimeout; its handler
// does not run. A wait longer than the pause gets the permit at its end.
func TestPausedPermitIsBusyUntilTheEnd(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	metrics := asynqmw.NewCollector()
	mw, err := asynqmw.New(redistest.Limiter(t, rdb), []asynqmw.Rule{
		{Name: "cap", Type: "short", Limit: 1, AcquireTimeout: 200 * time.Millisecond},
		{Name: "cap", Type: "long", Limit: 1, AcquireTimeout: 3 * time.Second},
	}, asynqmw.Metrics(metrics))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := inspect.New(redistest.Limiter(t, rdb)).Pause(ctx, "cap", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var ran atomic.Bool
	h := mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran.Store(true); return nil }))
	err = h.ProcessTask(ctx, asynq.NewTask("short", nil))
	var busy *asynqmw.BusyError
	if !errors.As(err, &busy) || !busy.Paused || busy.Rate || busy.Semaphore != "cap" || ran.Load() || asynqmw.IsFailure(nil)(err) {
		t.Fatalf("a paused permit: %v (ran %v), want a *BusyError with Paused, not a failure", err, ran.Load())
	}
	if left := 2*time.Second - time.Since(start); busy.RetryIn < left-100*time.Millisecond || busy.RetryIn > 3100*time.Millisecond {
		t.Fatalf("RetryIn %v, want until the pause's end (%v), spread up to 1½×", busy.RetryIn, left)
	}
	if n := metrics.Count("cap", asynqmw.SeriesRequeued); n != 1 {
		t.Fatalf("%v busy re-queues counted, want 1", n)
	}
	if err := h.ProcessTask(ctx, asynq.NewTask("long", nil)); err != nil || !ran.Load() {
		t.Fatalf("a wait past the pause: %v (ran %v)", err, ran.Load())
	}
	if took := time.Since(start); took < 1900*time.Millisecond {
		t.Fatalf("the handler ran %v after a 2s pause began", took)
	}
}
