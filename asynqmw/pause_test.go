package asynqmw_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

const pauseFor = 1500 * time.Millisecond

// pauseRules: a generous rate, whose pause is what the test watches.
var pauseRules = []asynqmw.Rule{{Name: "paused-api", TypePrefix: "partner:",
	Rate: limiter.Rate{Events: 100, Per: time.Second, Burst: 10}, AcquireTimeout: 3 * time.Second}}

// pauseWorker is a child process of TestPauseAcrossProcesses: its first
// "429" call pauses the rule; every other call is stamped.
func pauseWorker() int {
	return childWorker(4, pauseRules, func(rdb *redis.Client) asynq.HandlerFunc {
		return func(ctx context.Context, t *asynq.Task) error {
			bg := context.Background()
			if string(t.Payload()) != "429" {
				stamp.Run(bg, rdb, []string{"starts"})
				return nil
			}
			if first, _ := rdb.SetNX(bg, "tripped", 1, 0).Result(); first {
				stamp.Run(bg, rdb, []string{"paused-at"})
				return asynqmw.Pause(pauseFor, errors.New("429 Too Many Requests"))
			}
			stamp.Run(bg, rdb, []string{"rerun-at"})
			return nil
		}
	})
}

// A handler's PauseError in one worker process stops the rule in another
// (no call starts there before the pause ends, by the server's clock),
// and its task comes back at the pause's end with no retry spent.
func TestPauseAcrossProcesses(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	startChildOn(t, "pause", srv.Addr(), "a")
	startChildOn(t, "pause", srv.Addr(), "b")
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer client.Close()
	tripper := enqueue(t, client, asynq.NewTask("partner:call", []byte("429")), asynq.Queue("a"), asynq.MaxRetry(3))
	in := redistest.Limiter(t, rdb).Inspector()
	redistest.Eventually(t, 10*time.Second, "the rule is paused", func() bool {
		st, err := in.Rate(ctx, "paused-api")
		return err == nil && st.Paused > 0
	})
	const calls = 10
	for range calls {
		enqueue(t, client, asynq.NewTask("partner:call", nil), asynq.Queue("b"))
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	var ti *asynq.TaskInfo
	redistest.Eventually(t, 20*time.Second, "every call runs, and the paused task", func() bool {
		var err error
		ti, err = insp.GetTaskInfo("a", tripper.ID)
		return err == nil && ti.State == asynq.TaskStateCompleted && rdb.LLen(ctx, "starts").Val() == calls
	})
	pausedAt := stamps(t, rdb, "paused-at")[0]
	end := pausedAt + pauseFor.Microseconds()
	starts := stamps(t, rdb, "starts")
	if early := time.Duration(end-starts[0]) * time.Microsecond; early > 0 {
		t.Fatalf("the other process started a call %v before the pause ended", early)
	}
	rerun := stamps(t, rdb, "rerun-at")[0]
	if rerun < end || ti.Retried != 0 {
		t.Fatalf("the pausing task ran again %v after its pause began (pause %v), retried %d: want after the pause, no retry spent",
			time.Duration(rerun-pausedAt)*time.Microsecond, pauseFor, ti.Retried)
	}
	t.Logf("other process's first call %v after the pause began; the pausing task again after %v",
		time.Duration(starts[0]-pausedAt)*time.Microsecond, time.Duration(rerun-pausedAt)*time.Microsecond)
}

// Called directly: a PauseError pauses the task's rules that have a
// Rate (not those with only a Limit), counts it, and makes the task
// return a *BusyError (Paused) for the pause's end; the next task waits
// for the pause's end.
func TestPauseErrorPausesRatedRules(t *testing.T) {
	srv := redistest.StartServer(t)
	lc := redistest.Limiter(t, srv.Client(t))
	metrics := asynqmw.NewCollector()
	mw, err := asynqmw.New(lc, []asynqmw.Rule{
		{Name: "rated", Rate: limiter.Rate{Events: 100, Per: time.Second, Burst: 1}},
		{Name: "capped", Limit: 1},
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
	if !errors.As(err, &busy) || !busy.Paused || busy.Semaphore != "rated" || !errors.As(err, &pe) || !errors.Is(err, cause) {
		t.Fatalf("got %v, want a *BusyError pausing rated, wrapping the PauseError", err)
	}
	if busy.RetryIn < 290*time.Millisecond || busy.RetryIn > 300*time.Millisecond || asynqmw.IsFailure(nil)(err) {
		t.Fatalf("RetryIn %v (want the pause's 300ms), failure %v", busy.RetryIn, asynqmw.IsFailure(nil)(err))
	}
	in := lc.Inspector()
	if st, _ := in.Rate(ctx, "capped"); st.Paused != 0 {
		t.Fatal("a rule with no Rate was paused")
	}
	if n := metrics.Count("rated", asynqmw.SeriesPausesSet); n != 1 {
		t.Fatalf("%v pauses counted, want 1", n)
	}
	start := time.Now()
	if err := mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })).ProcessTask(ctx, asynq.NewTask("t", nil)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("the next task ran %v after the pause began (300ms)", took)
	}
}
