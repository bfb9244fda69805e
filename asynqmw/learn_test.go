package asynqmw_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// RateOptions learns a rule's Rate alone: a task's Pause (a 429) cuts
// the learned rate and leaves the rule's Limit of 5 as it is, where
// LimiterOptions would cut both (a 429 cannot say which limit refused:
// the limit would fall from its use, the task's one permit).
func TestRateOptionsLearnTheRateAlone(t *testing.T) {
	srv := redistest.StartServer(t)
	lc := redistest.Limiter(t, srv.Client(t))
	mw, err := asynqmw.New(lc, []asynqmw.Rule{
		{Name: "api", Limit: 5, Rate: limiter.Rate{Events: 30, Per: time.Second, Burst: 1}},
	}, asynqmw.RateOptions(limiter.Adaptive(1, 30)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pause := 100 * time.Millisecond
	err = mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		return asynqmw.Pause(pause, nil)
	})).ProcessTask(ctx, asynq.NewTask("t", nil))
	if err == nil {
		t.Fatal("a paused task returned nil")
	}
	in := inspect.New(lc)
	st, err := in.Rate(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	if st.Learned == nil || st.Learned.Value >= 30 || st.Fleet.Events >= 30 {
		t.Fatalf("rate after a 429: %+v (learned %+v), want the learned 30/s cut", st.Fleet, st.Learned)
	}
	if n, err := in.Limit(ctx, "api"); err != nil || n != 0 {
		t.Fatalf("fleet limit after a 429: %d (%v), want none: the Limit is not learned", n, err)
	}
	time.Sleep(pause)
	sem, err := lc.Semaphore("api", 5)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := sem.TryAcquire(ctx); err != nil {
			t.Fatalf("permit %d of 5 after the pause: %v", i+1, err)
		}
	}
}

// A task holding its permit waits for its slot at the rate the fleet
// applies (here set to 10/s), not at its rule's 100/s: five tasks at
// once each ask for their permit once. Bounded at the rule's rate (6
// slots of 10ms), the later slots, 100-400ms off, would be deemed far,
// and those tasks would give their permits back and ask again.
func TestHolderWaitsAtTheAppliedRate(t *testing.T) {
	srv := redistest.StartServer(t)
	lc := redistest.Limiter(t, srv.Client(t))
	ctx := context.Background()
	if err := inspect.New(lc).SetRate(ctx, "api", limiter.Rate{Events: 10, Per: time.Second, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	metrics := asynqmw.NewCollector()
	mw, err := asynqmw.New(lc, []asynqmw.Rule{
		{Name: "api", Limit: 5, Rate: limiter.Rate{Events: 100, Per: time.Second, Burst: 1}},
	}, asynqmw.Metrics(metrics))
	if err != nil {
		t.Fatal(err)
	}
	h := mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	errs := make(chan error, 5)
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() { errs <- h.ProcessTask(ctx, asynq.NewTask("t", nil)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := metrics.Count("api", asynqmw.SeriesGated); n != 5 {
		t.Fatalf("5 tasks asked for a permit %v times, want 5: a slot at the applied rate was deemed far", n)
	}
}
