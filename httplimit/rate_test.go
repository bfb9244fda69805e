package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redsem/redsem/httplimit"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// A rate and a limit both hold: 12 requests at once, limit 2, 20/s with
// a burst of 4. The upstream never has more than 2 in, and the 12th
// arrives no sooner than the rate allows (4 at once, then one per 50ms:
// 400ms); the limit alone would let all 12 through in about 200ms, the
// rate alone 4 in at once.
func TestTransportRateAndLimitBothHold(t *testing.T) {
	e := newEnv(t)
	var (
		c        redistest.Gauge
		mu       sync.Mutex
		arrivals []time.Time
	)
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		c.Enter()
		defer c.Leave()
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		time.Sleep(30 * time.Millisecond)
	})
	hc := httpClient(t, transport(t, e.lc, httplimit.TransportConfig{Name: "both", Limit: 2,
		Rate: limiter.Rate{Events: 20, Per: time.Second, Burst: 4}, AcquireTimeout: 5 * time.Second}))
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := getErr(hc, up.URL); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	if len(arrivals) != 12 {
		t.Fatalf("%d requests arrived, want 12", len(arrivals))
	}
	if p := c.Peak(); p != 2 {
		t.Fatalf("peak of %d requests at once with a limit of 2", p)
	}
	if d := arrivals[11].Sub(arrivals[0]); d < 350*time.Millisecond {
		t.Fatalf("12 requests arrived within %v: faster than 20/s with a burst of 4 (400ms)", d)
	}
}

// A request sleeping until its rate slot holds no permit: another
// process could use it meanwhile.
func TestTransportRateSleepHoldsNoPermit(t *testing.T) {
	e := newEnv(t)
	up := upstream(t, answering)
	hc := httpClient(t, transport(t, e.lc, httplimit.TransportConfig{Name: "order", Limit: 1,
		Rate: limiter.Rate{Events: 4, Per: time.Second, Burst: 1}}))
	if err := getErr(hc, up.URL); err != nil { // spends the burst
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- getErr(hc, up.URL) }() // sleeps ~250ms for its slot
	time.Sleep(100 * time.Millisecond)
	if hs := holders(t, e.other(t), hostName("order", up)); len(hs) != 0 {
		t.Fatalf("a permit is held while the request sleeps until its slot: %v", hs)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The slot and the permit share one AcquireTimeout: after sleeping
// 250ms for its slot, a request waits for a permit held elsewhere only
// what is left of 400ms. A slot beyond AcquireTimeout fails at once.
func TestTransportRateAndPermitShareTheWait(t *testing.T) {
	e := newEnv(t)
	up := upstream(t, answering)
	hc := httpClient(t, transport(t, e.lc, httplimit.TransportConfig{Name: "budget", Limit: 1,
		Rate: limiter.Rate{Events: 4, Per: time.Second, Burst: 1}, AcquireTimeout: 400 * time.Millisecond}))
	if err := getErr(hc, up.URL); err != nil { // spends the burst
		t.Fatal(err)
	}
	lease, err := sem(t, e.other(t), hostName("budget", up), 1).Acquire(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctxT(t, 5*time.Second))
	start := time.Now()
	err = getErr(hc, up.URL)
	took := time.Since(start)
	var busy *limiter.BusyError
	if !errors.As(err, &busy) || busy.Rate || !errors.Is(err, limiter.ErrTimeout) {
		t.Fatalf("permit held elsewhere: %v, want the semaphore's timeout", err)
	}
	if took < 350*time.Millisecond || took > 550*time.Millisecond {
		t.Fatalf("gave up after %v, want about AcquireTimeout (400ms) in all", took)
	}

	slow := httpClient(t, transport(t, e.lc, httplimit.TransportConfig{Name: "beyond", Limit: 1,
		Rate: limiter.Rate{Events: 1, Per: 10 * time.Second, Burst: 1}, AcquireTimeout: 400 * time.Millisecond}))
	if err := getErr(slow, up.URL); err != nil { // spends the burst
		t.Fatal(err)
	}
	start = time.Now()
	err = getErr(slow, up.URL)
	if !errors.As(err, &busy) || !busy.Rate || busy.Paused || busy.RetryIn < 9*time.Second || time.Since(start) > 150*time.Millisecond {
		t.Fatalf("a slot beyond AcquireTimeout: %v after %v, want the rate's BusyError at once", err, time.Since(start))
	}
}

// A request cancelled while it sleeps until its slot fails with its
// context's cause, and gives the slot back: the next request gets it.
func TestTransportCancelledRateSleepGivesSlotBack(t *testing.T) {
	noLeaks(t)
	e := newEnv(t)
	up := upstream(t, answering)
	hc := httpClient(t, transport(t, e.lc, httplimit.TransportConfig{Name: "giveback",
		Rate: limiter.Rate{Events: 2, Per: time.Second, Burst: 1}}))
	start := time.Now()
	if err := getErr(hc, up.URL); err != nil { // spends the burst
		t.Fatal(err)
	}
	// Cancelled, not a deadline: a deadline would bound the slot.
	ctx, cancel := context.WithCancelCause(context.Background())
	gaveUp := errors.New("caller gave up")
	time.AfterFunc(100*time.Millisecond, func() { cancel(gaveUp) })
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.URL, nil)
	if _, err := hc.Do(req); !errors.Is(err, gaveUp) {
		t.Fatalf("cancelled while sleeping: %v, want the context's cause", err)
	}
	if err := getErr(hc, up.URL); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 800*time.Millisecond {
		t.Fatalf("the next request went %v after the first: the cancelled slot (500ms) was not given back", d)
	}
}

// A Middleware with a rate and no limit: the handler runs without a
// lease; a request whose slot is not now is answered 429 with the wait
// as Retry-After; a pause set elsewhere is answered likewise.
func TestMiddlewareRate(t *testing.T) {
	e := newEnv(t)
	var ran sync.WaitGroup
	srv := middleware(t, e.lc, httplimit.ServerConfig{Name: "mwrate", Rate: limiter.Rate{Events: 1, Per: 3 * time.Second, Burst: 1},
		AcquireTimeout: -1}, func(w http.ResponseWriter, r *http.Request) {
		defer ran.Done()
		if _, ok := limiter.LeaseFrom(r.Context()); ok {
			t.Error("a lease without a Limit")
		}
	})
	hc := httpClient(t, nil)
	ran.Add(1)
	if resp := get(t, hc, srv.URL); resp.StatusCode != http.StatusOK {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	ran.Wait()
	resp := get(t, hc, srv.URL)
	if ra := resp.Header.Get("Retry-After"); resp.StatusCode != http.StatusTooManyRequests || (ra != "2" && ra != "3") {
		t.Fatalf("second: %d, Retry-After %q; want 429, 2 or 3", resp.StatusCode, ra)
	}
	if _, err := inspect.New(e.other(t)).Pause(ctxT(t, 5*time.Second), "mwrate", time.Minute); err != nil {
		t.Fatal(err)
	}
	resp = get(t, hc, srv.URL)
	if ra := resp.Header.Get("Retry-After"); resp.StatusCode != http.StatusTooManyRequests || ra != "60" {
		t.Fatalf("paused: %d, Retry-After %q; want 429, 60", resp.StatusCode, ra)
	}
}

// A bad Rate, pause bound or latency tolerance is reported by the constructors as
// an *ArgumentError naming the field or option.
func TestBadRateConfig(t *testing.T) {
	e := newEnv(t)
	check := func(what string, err error, arg string) {
		t.Helper()
		var ae *limiter.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != arg {
			t.Fatalf("%s: %v, want a *limiter.ArgumentError naming %s", what, err, arg)
		}
	}
	_, err := httplimit.NewTransport(e.lc, httplimit.TransportConfig{Name: "x", Rate: limiter.Rate{Events: 1, Per: time.Second}})
	check("Burst 0", err, "Rate.Burst")
	_, err = httplimit.Middleware(e.lc, httplimit.ServerConfig{Name: "x", Rate: limiter.Rate{Events: 0, Per: time.Second, Burst: 1}})
	check("Events 0", err, "Rate.Events")
	_, err = httplimit.NewTransport(e.lc, httplimit.TransportConfig{Name: "x", Limit: -1, Rate: rate100})
	check("Limit -1 with a Rate", err, "Limit")
	_, err = httplimit.NewTransport(e.lc, httplimit.TransportConfig{Name: "x", Rate: rate100}, httplimit.PauseOnRetryAfter(-time.Second))
	check("negative pause bound", err, "PauseOnRetryAfter")
	_, err = httplimit.NewTransport(e.lc, httplimit.TransportConfig{Name: "x", Rate: rate100}, httplimit.PauseOnRetryAfter(25*time.Hour))
	check("pause bound over 24h", err, "PauseOnRetryAfter")
	_, err = httplimit.NewTransport(e.lc, httplimit.TransportConfig{Name: "x", Rate: rate100}, httplimit.CutOnLatency(1))
	check("latency tolerance 1", err, "CutOnLatency")
}

// Slots whose permit comes late do not bunch: four requests reserve
// slots 100ms apart while the one permit is held elsewhere, and when it
// frees they still arrive about 100ms apart (a late slot is replaced by
// an event now, or the request gives the permit back and reserves anew),
// not one after the other at once.
func TestTransportLatePermitTakesNewSlot(t *testing.T) {
	e := newEnv(t)
	var (
		mu       sync.Mutex
		arrivals []time.Time
	)
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
	})
	hc := httpClient(t, transport(t, e.lc, httplimit.TransportConfig{Name: "late", Limit: 1,
		Rate: limiter.Rate{Events: 10, Per: time.Second, Burst: 1}, AcquireTimeout: 5 * time.Second}))
	held, err := sem(t, e.other(t), hostName("late", up), 1).Acquire(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const requests = 4
	errs := make(chan error, requests)
	for range requests {
		go func() { errs <- getErr(hc, up.URL) }()
	}
	time.Sleep(time.Second) // past every slot
	if err := held.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	for range requests {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	// One event's time is 100ms; a request may start up to
	// limiter.Lateness (20ms) after its slot, and timers a little more.
	for i := 1; i < len(arrivals); i++ {
		if gap := arrivals[i].Sub(arrivals[i-1]); gap < 60*time.Millisecond {
			t.Fatalf("requests %d and %d arrived %v apart at 10/s burst 1 (arrivals %v)", i-1, i, gap, arrivals)
		}
	}
}
