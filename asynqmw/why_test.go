package asynqmw_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redsem/redsem/asynqmw"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// syncBuffer is a log sink safe for the middleware's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A task turned away says why and when in its *BusyError and in the
// re-queue's log line: a Key rule's full key is the key's own limit
// ("key-limit"), a plain rule's full limit "full", a pause "paused" with
// its end as the ETA, a spent rate "rate" with its slot.
func TestBusyErrorSaysWhyAndWhen(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	mw, err := asynqmw.New(redistest.Limiter(t, rdb), []asynqmw.Rule{
		{Name: "whykey", Type: "key", Limit: 1, AcquireTimeout: 50 * time.Millisecond,
			Key: func(_ context.Context, t *asynq.Task) (string, bool) { return string(t.Payload()), true }},
		{Name: "whyfull", Type: "full", Limit: 1, AcquireTimeout: 50 * time.Millisecond},
		{Name: "whypause", Type: "pause", Limit: 1, AcquireTimeout: 50 * time.Millisecond},
		{Name: "whyrate", Type: "rate", Rate: limiter.Rate{Events: 1, Per: 10 * time.Second, Burst: 1}, AcquireTimeout: 50 * time.Millisecond},
	}, asynqmw.Logger(logger))
	if err != nil {
		t.Fatal(err)
	}
	holdElsewhere(t, rdb, "whykey:acme")
	holdElsewhere(t, rdb, "whyfull")
	if _, err := inspect.New(redistest.Limiter(t, rdb)).Pause(ctx, "whypause", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	h := mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	if err := h.ProcessTask(ctx, asynq.NewTask("rate", nil)); err != nil { // spends the rate's burst
		t.Fatal(err)
	}
	for _, tc := range []struct {
		task, payload string
		want          limiter.Reason
		eta, most     time.Duration
	}{
		// A full limit's ETA is the earliest expiry: the holders' TTL (10s) here.
		{"key", "acme", asynqmw.ReasonKeyLimit, 0, 10 * time.Second},
		{"full", "", limiter.ReasonFull, 0, 10 * time.Second},
		{"pause", "", limiter.ReasonPaused, 4 * time.Second, 5 * time.Second},
		{"rate", "", limiter.ReasonRate, 9 * time.Second, 10 * time.Second},
	} {
		err := h.ProcessTask(ctx, asynq.NewTask(tc.task, []byte(tc.payload)))
		var busy *asynqmw.BusyError
		if !errors.As(err, &busy) || busy.Reason != tc.want || busy.ETA < tc.eta || busy.ETA > tc.most {
			t.Fatalf("%s: %v (%+v), want a *BusyError with Reason %q and an ETA of at least %v", tc.task, err, busy, tc.want, tc.eta)
		}
		if !strings.Contains(err.Error(), string(tc.want)) {
			t.Fatalf("%s: the error %q does not say %q", tc.task, err, tc.want)
		}
		if line := "reason=" + string(tc.want); !strings.Contains(logs.String(), line) {
			t.Fatalf("%s: no re-queue log line with %s in:\n%s", tc.task, line, logs.String())
		}
	}
}
