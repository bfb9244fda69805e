package limiter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

func newRate(t *testing.T, b backend, name string, r limiter.Rate, opts ...limiter.NameOption) *limiter.RateLimit {
	t.Helper()
	rl, err := clientFor(t, b.client(t), limiter.RestartQuarantine(0)).RateLimit(name, r, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return rl
}

// Callers get their times in the order they reached Redis, one interval
// apart; a heavy event is not overtaken by light ones asked after it.
func TestRateServesInOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxT(t, 10*time.Second)
		rl := newRate(t, b, uniqueName(b, "order"), limiter.Rate{Events: 10, Per: time.Second, Burst: 3})
		for range 3 { // the burst
			if ok, err := rl.Allow(ctx); !ok || err != nil {
				t.Fatalf("within the burst: %v, %v", ok, err)
			}
		}
		if ok, err := rl.Allow(ctx); ok || err != nil {
			t.Fatalf("past the burst: allowed %v, %v", ok, err)
		}
		heavy, err := rl.ReserveN(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		light, err := rl.ReserveN(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		// The heavy event waits for 3 intervals to free; the light one
		// asked after it goes one interval after it.
		if d := heavy.Delay(); d < 250*time.Millisecond || d > 310*time.Millisecond {
			t.Errorf("heavy event in %v, want ~300ms", d)
		}
		if gap := light.Time().Sub(heavy.Time()); gap < 95*time.Millisecond || gap > 105*time.Millisecond {
			t.Errorf("light event %v after the heavy one, want one interval (100ms)", gap)
		}
	})
}

// A cancelled reservation gives its time back when nothing was reserved
// after it; otherwise it cannot, since later callers have their times.
func TestRateCancelGivesBack(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rl := newRate(t, b, "cancel", limiter.Rate{Events: 10, Per: time.Second, Burst: 1})
	if _, err := rl.ReserveN(ctx, 1); err != nil { // the burst
		t.Fatal(err)
	}
	a, _ := rl.ReserveN(ctx, 1)
	b2, _ := rl.ReserveN(ctx, 1)
	if ok, err := a.Cancel(ctx); ok || err != nil {
		t.Fatalf("cancel with a later reservation: %v, %v; want false", ok, err)
	}
	if ok, err := b2.Cancel(ctx); !ok || err != nil {
		t.Fatalf("cancel of the last reservation: %v, %v; want true", ok, err)
	}
	c, _ := rl.ReserveN(ctx, 1)
	if gap := c.Time().Sub(b2.Time()); gap < -5*time.Millisecond || gap > 5*time.Millisecond {
		t.Errorf("after a cancel the next caller goes %v after the cancelled time, want at it (one interval later without the cancel)", gap)
	}

	// A Wait whose ctx ends gives its time back the same way.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	before, _ := rl.ReserveN(ctx, 1)
	if ok, _ := before.Cancel(ctx); !ok {
		t.Fatal("could not cancel the last reservation")
	}
	if err := rl.Wait(short); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("a wait longer than ctx's deadline: %v, want ErrBusy at once", err)
	}
}

// A wait beyond the deadline (or AcquireTimeout) is refused at once with
// the time it would have taken, and reserves nothing.
func TestRateWaitBeyondTheBoundIsBusy(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rl := newRate(t, b, "bound", limiter.Rate{Events: 1, Per: time.Second, Burst: 1}, limiter.AcquireTimeout(200*time.Millisecond))
	if err := rl.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := rl.Wait(ctx)
	var be *limiter.BusyError
	if !errors.As(err, &be) || !errors.Is(err, limiter.ErrTimeout) || be.RetryIn < 900*time.Millisecond {
		t.Fatalf("a 1s wait with AcquireTimeout 200ms: %v, want a BusyError with RetryIn ~1s", err)
	}
	if time.Since(start) > 100*time.Millisecond {
		t.Errorf("refused after %v, want at once", time.Since(start))
	}
	if r2, err := rl.ReserveN(ctx, 1); err == nil {
		t.Errorf("refused wait reserved a time all the same: the next goes in %v", r2.Delay())
	}
}

// A Redis restarted empty forgets the events it counted: the burst does
// not come back at once (the restart quarantine on), and does with the
// quarantine off (the control).
func TestRateAfterARestartGivesNoBurst(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 20*time.Second)
	rate := limiter.Rate{Events: 10, Per: time.Second, Burst: 10}
	careful, err := redistest.Limiter(t, srv.Client(t), limiter.RestartQuarantine(10*time.Second)).RateLimit("restart", rate)
	if err != nil {
		t.Fatal(err)
	}
	careless, err := redistest.Limiter(t, srv.Client(t), limiter.RestartQuarantine(0)).RateLimit("restart-off", rate)
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	allowed := func(rl *limiter.RateLimit) int {
		n := 0
		for range 10 {
			if ok, err := rl.Allow(ctx); err != nil {
				t.Fatal(err)
			} else if ok {
				n++
			}
		}
		return n
	}
	if n := allowed(careful); n > 1 {
		t.Errorf("%d of a burst of 10 allowed right after a restart, want at most 1", n)
	}
	if n := allowed(careless); n != 10 {
		t.Errorf("RestartQuarantine(0): %d of a burst of 10 allowed, want 10", n)
	}
}

// The careful start asks the server's age (an INFO, dearer than the rest
// of the call) only when the name has no state: a name used again within
// a minute keeps it, though its burst refilled long before, and is known
// to the Inspector only while its burst is not whole.
func TestRateUsedOftenDoesNotAskTheServerAge(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 20*time.Second)
	c := redistest.Limiter(t, srv.Client(t), limiter.RestartQuarantine(time.Second))
	rl, err := c.RateLimit("often", limiter.Rate{Events: 1000, Per: time.Second, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	warm, err := c.RateLimit("warm", limiter.Rate{Events: 1, Per: time.Second, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := warm.Allow(ctx); err != nil { // the Client's own first checks
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // past the quarantine, so the first is allowed
	srv.ResetStats(t)
	for range 10 {
		if ok, err := rl.Allow(ctx); err != nil || !ok {
			t.Fatalf("Allow at a tenth of the rate: %v, %v", ok, err)
		}
		time.Sleep(20 * time.Millisecond) // the burst (1 ms) refills
	}
	if n := srv.CommandCalls(t)["info"]; n > 1 {
		t.Errorf("%d INFO calls for 10 events 20 ms apart, want at most the first", n)
	}
	st, err := inspect.New(c).Rate(ctx, "often")
	if err != nil || st.Known || st.NextFree != 0 {
		t.Errorf("Rate of a name whose burst refilled: %+v, %v; want not Known", st, err)
	}
}

// SetRate changes the rate of every RateLimit of the name, whatever its
// own; clearing it brings their own back.
func TestSetRateIsFleetWide(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 10*time.Second)
	own := limiter.Rate{Events: 100, Per: time.Second, Burst: 1}
	rl := newRate(t, b, "fleet", own)
	insp := inspect.New(redistest.Limiter(t, b.client(t)))
	slow := limiter.Rate{Events: 2, Per: time.Second, Burst: 1}
	if err := insp.SetRate(ctx, "fleet", slow); err != nil {
		t.Fatal(err)
	}
	if st, err := insp.Rate(ctx, "fleet"); err != nil || st.Fleet != slow {
		t.Fatalf("Rate: %+v, %v; want fleet %v", st, err, slow)
	}
	_, _ = rl.ReserveN(ctx, 1)
	r, _ := rl.ReserveN(ctx, 1)
	if d := r.Delay(); d < 400*time.Millisecond {
		t.Errorf("under a fleet rate of 2/s the next event goes in %v, want ~500ms", d)
	}
	if ok, _ := r.Cancel(ctx); !ok {
		t.Fatal("cancel")
	}
	if err := insp.SetRate(ctx, "fleet", limiter.Rate{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
	_, _ = rl.ReserveN(ctx, 1)
	r, _ = rl.ReserveN(ctx, 1)
	if d := r.Delay(); d > 20*time.Millisecond {
		t.Errorf("with the fleet rate cleared the next event goes in %v, want ~10ms (its own 100/s)", d)
	}
}

// Bad input is refused with an *ArgumentError naming it; a Redlock Client
// refuses rates with ErrRatesUnsupported.
func TestRateBadInput(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 10*time.Second)
	c := clientFor(t, b.client(t))
	for _, tc := range []struct {
		r   limiter.Rate
		arg string
	}{
		{limiter.Rate{Events: 0, Per: time.Second, Burst: 1}, "rate.Events"},
		{limiter.Rate{Events: 1, Per: 0, Burst: 1}, "rate.Per"},
		{limiter.Rate{Events: 1, Per: 48 * time.Hour, Burst: 1}, "rate.Per"},
		{limiter.Rate{Events: 1, Per: time.Second, Burst: 0}, "rate.Burst"},
		{limiter.Rate{Events: 1 << 30, Per: time.Second, Burst: 1}, "rate"},
	} {
		var ae *limiter.ArgumentError
		if _, err := c.RateLimit("bad", tc.r); !errors.As(err, &ae) || ae.Arg != tc.arg {
			t.Errorf("RateLimit(%+v): %v, want an ArgumentError naming %s", tc.r, err, tc.arg)
		}
	}
	rl := newRate(t, b, "bad", limiter.Rate{Events: 1, Per: time.Second, Burst: 2})
	var ae *limiter.ArgumentError
	if _, err := rl.AllowN(ctx, 3); !errors.As(err, &ae) || ae.Arg != "n" {
		t.Errorf("AllowN above the burst: %v, want an ArgumentError naming n", err)
	}
	if err := rl.WaitN(ctx, 0); !errors.As(err, &ae) || ae.Arg != "n" {
		t.Errorf("WaitN(0): %v, want an ArgumentError naming n", err)
	}
	if _, err := inspect.New(c).Pause(ctx, "bad", 0); !errors.As(err, &ae) || ae.Arg != "d" {
		t.Errorf("Pause(0): %v, want an ArgumentError naming d", err)
	}
	var nodes []redis.UniversalClient
	for _, s := range redistest.StartNodes(t, 3) {
		nodes = append(nodes, s.Client(t))
	}
	rc, err := newRedlockClient(t, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.RateLimit("r", limiter.Rate{Events: 1, Per: time.Second, Burst: 1}); !errors.Is(err, limiter.ErrRatesUnsupported) {
		t.Errorf("RateLimit on Redlock: %v, want ErrRatesUnsupported", err)
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]limiter.Rate{
		"100/1m burst 20": {Events: 100, Per: time.Minute, Burst: 20},
		"100/m":           {Events: 100, Per: time.Minute, Burst: 1},
		"5/10s":           {Events: 5, Per: 10 * time.Second, Burst: 1},
	} {
		if got, err := limiter.ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
		if got, _ := limiter.ParseRate(want.String()); got != want {
			t.Errorf("ParseRate(%q) = %v; want %v back", want.String(), got, want)
		}
	}
	for _, in := range []string{"", "100", "x/1m", "100/x", "100/1m burst x", "0/1m", "100/1m burst 0"} {
		if _, err := limiter.ParseRate(in); !errors.Is(err, limiter.ErrInvalidArgument) {
			t.Errorf("ParseRate(%q): %v, want an ArgumentError", in, err)
		}
	}
}

// A reservation whose time passed long ago is renewed only when the rate
// has room now: starting late, its event would bunch with later ones.
func TestRenewLateReservation(t *testing.T) {
	b := singleBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rl := newRate(t, b, "renew", limiter.Rate{Events: 10, Per: time.Second, Burst: 1})
	r, err := rl.ReserveN(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := r.Renew(ctx); !ok || err != nil {
		t.Fatalf("Renew of a current reservation: %v, %v; want true", ok, err)
	}
	late, _ := rl.ReserveN(ctx, 1) // at +100ms
	_, _ = rl.ReserveN(ctx, 1)     // at +200ms: the rate has no room until then
	time.Sleep(time.Until(late.Time().Add(2 * limiter.Lateness)))
	if ok, err := late.Renew(ctx); ok || err != nil {
		t.Fatalf("Renew of a late reservation with no room now: %v, %v; want false", ok, err)
	}
	time.Sleep(300 * time.Millisecond)
	if ok, err := late.Renew(ctx); !ok || err != nil {
		t.Fatalf("Renew of a late reservation with room now: %v, %v; want true", ok, err)
	}
}
