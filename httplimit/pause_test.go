package httplimit_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redsem/redsem/httplimit"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// rate100 paces nothing in these tests: only a pause holds requests back.
var rate100 = limiter.Rate{Events: 100, Per: time.Second, Burst: 10}

// answering is an upstream that answers ?status= (default 200) with
// ?ra= as its Retry-After, and a body.
func answering(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if ra := q.Get("ra"); ra != "" {
		w.Header().Set("Retry-After", ra)
	}
	status := http.StatusOK
	if s := q.Get("status"); s != "" {
		status, _ = strconv.Atoi(s)
	}
	w.WriteHeader(status)
	io.WriteString(w, "upstream's body")
}

// pathKey names a request's gate by its path, so that each case of a
// test has its own.
func pathKey(r *http.Request) (string, bool) { return r.URL.Path, true }

func paused(t *testing.T, c *limiter.Client, name string) time.Duration {
	t.Helper()
	st, err := inspect.New(c).Rate(ctxT(t, 5*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	return st.Paused
}

func httpDate(d time.Duration) string { return time.Now().Add(d).UTC().Format(http.TimeFormat) }

// A 429 or 503 with a Retry-After pauses the name for as long as it says,
// at most the bound, with a Rate or a Limit alone; the response reaches
// the caller unchanged. Anything else pauses nothing.
func TestTransportPausesOnRetryAfter(t *testing.T) {
	e := newEnv(t)
	up := upstream(t, answering)
	observer := e.other(t)
	for _, tc := range []struct {
		name     string
		status   int
		ra       string
		noRate   bool
		opts     []httplimit.Option
		min, max time.Duration // of the pause; 0, 0: none
	}{
		{name: "seconds", status: 429, ra: "2", min: 1500 * time.Millisecond, max: 2 * time.Second},
		{name: "date", status: 429, ra: httpDate(3 * time.Second), min: time.Second, max: 3 * time.Second}, // whole seconds
		{name: "503", status: 503, ra: "2", min: 1500 * time.Millisecond, max: 2 * time.Second},
		{name: "bound", status: 429, ra: "120", opts: []httplimit.Option{httplimit.PauseOnRetryAfter(time.Second)},
			min: 500 * time.Millisecond, max: time.Second},
		{name: "default-bound", status: 429, ra: "86400", min: 4 * time.Minute, max: 5 * time.Minute},
		{name: "off", status: 429, ra: "2", opts: []httplimit.Option{httplimit.PauseOnRetryAfter(0)}},
		{name: "limit-only", status: 429, ra: "2", noRate: true, min: 1500 * time.Millisecond, max: 2 * time.Second},
		{name: "500", status: 500, ra: "2"},
		{name: "no-header", status: 429},
		{name: "malformed", status: 429, ra: "soon"},
		{name: "negative", status: 429, ra: "-5"},
		{name: "fraction", status: 429, ra: "1.5"},
		{name: "past-date", status: 429, ra: httpDate(-time.Minute)},
	} {
		cfg := httplimit.TransportConfig{Name: "pause", Rate: rate100, Key: pathKey, AcquireTimeout: -1}
		if tc.noRate {
			cfg.Rate, cfg.Limit = limiter.Rate{}, 1
		}
		var logs bytes.Buffer
		opts := append(tc.opts, httplimit.Logger(slog.New(slog.NewTextHandler(&logs, nil))))
		hc := httpClient(t, transport(t, e.lc, cfg, opts...))
		req, _ := http.NewRequest(http.MethodGet, up.URL+"/"+tc.name+"?status="+strconv.Itoa(tc.status)+"&ra="+strings.ReplaceAll(tc.ra, " ", "+"), nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != "upstream's body" || resp.StatusCode != tc.status || resp.Header.Get("Retry-After") != tc.ra {
			t.Fatalf("%s: the caller got %d, Retry-After %q, body %q, %v: not the upstream's answer",
				tc.name, resp.StatusCode, resp.Header.Get("Retry-After"), body, err)
		}
		if p := paused(t, observer, "pause:/"+tc.name); p < tc.min || p > tc.max {
			t.Errorf("%s: paused for %v, want %v..%v", tc.name, p, tc.min, tc.max)
		}
		if logs.Len() > 0 { // a Pause that Redis refused, say of 0s
			t.Errorf("%s: logged %s", tc.name, logs.String())
		}
	}
}

// The pause holds back every Client's requests, not only the one that
// got the 429: another Client's Transport that does not wait fails at
// once with the rate's BusyError, Paused. Without a Rate, the semaphore
// holds them: another Client's Limit-only Transport that does not wait
// fails at once with its BusyError, Paused; one that waits is sent at
// the pause's end.
func TestTransportPauseHoldsOtherClients(t *testing.T) {
	e := newEnv(t)
	var (
		mu      sync.Mutex
		arrived []time.Time
	)
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived = append(arrived, time.Now())
		mu.Unlock()
		answering(w, r)
	})
	cfg := httplimit.TransportConfig{Name: "held", Rate: rate100, Limit: 5}
	resp, err := httpClient(t, transport(t, e.lc, cfg)).Get(up.URL + "/?status=429&ra=2")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cfg.AcquireTimeout = -1
	err = getErr(httpClient(t, transport(t, e.other(t), cfg)), up.URL)
	var busy *limiter.BusyError
	if !errors.As(err, &busy) || !busy.Rate || !busy.Paused || busy.RetryIn < time.Second || busy.RetryIn > 2*time.Second {
		t.Fatalf("another Client during the pause: %v (%+v), want a paused rate's BusyError, RetryIn 1..2s", err, busy)
	}

	capped := httplimit.TransportConfig{Name: "held-cap", Limit: 5}
	resp, err = httpClient(t, transport(t, e.lc, capped)).Get(up.URL + "/?status=429&ra=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	paused := time.Now()
	capped.AcquireTimeout = -1
	err = getErr(httpClient(t, transport(t, e.other(t), capped)), up.URL)
	if !errors.As(err, &busy) || busy.Rate || !busy.Paused || busy.RetryIn < 500*time.Millisecond || busy.RetryIn > 1100*time.Millisecond {
		t.Fatalf("another Client's Limit-only Transport during the pause: %v (%+v), want a paused semaphore's BusyError, RetryIn ~1s", err, busy)
	}
	capped.AcquireTimeout = 3 * time.Second
	if err := getErr(httpClient(t, transport(t, e.other(t), capped)), up.URL); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	last := arrived[len(arrived)-1]
	mu.Unlock()
	if d := last.Sub(paused); d < 900*time.Millisecond {
		t.Fatalf("a Limit-only request waiting out the pause was sent %v after a 1s pause began", d)
	}
}

// A Middleware whose name is paused (say by a Transport elsewhere that
// heard 429) answers BusyStatus with a Retry-After until the pause's end,
// with a Limit alone: at once when it does not wait, after
// AcquireTimeout when it does; the handler does not run.
func TestMiddlewarePausedPermit(t *testing.T) {
	e := newEnv(t)
	if _, err := inspect.New(e.other(t)).Pause(ctxT(t, 5*time.Second), "mwpause", time.Minute); err != nil {
		t.Fatal(err)
	}
	hc := httpClient(t, nil)
	for _, wait := range []time.Duration{-1, 200 * time.Millisecond} {
		srv := middleware(t, e.lc, httplimit.ServerConfig{Name: "mwpause", Limit: 2, AcquireTimeout: wait},
			func(w http.ResponseWriter, r *http.Request) { t.Error("the handler ran while paused") })
		resp := get(t, hc, srv.URL)
		if ra := resp.Header.Get("Retry-After"); resp.StatusCode != http.StatusTooManyRequests || (ra != "60" && ra != "59") {
			t.Fatalf("AcquireTimeout %v, paused: %d, Retry-After %q; want 429, 60", wait, resp.StatusCode, ra)
		}
	}
}

// The fleet: two Clients' Transports (two processes, as far as
// Redis can tell) send at 30/s to an upstream that answers one request
// 429 with Retry-After: 1. The requests whose slots were reserved before
// the 429 (up to 12, 400ms ahead) are held past the Retry-After with the
// rest: none reaches the upstream inside it, beyond the few ms in which
// one whose slot had come was already on its way; a request that did
// would be answered 429 again, as a real API does, and pause the fleet
// anew.
func TestTransportHoldsRequestsReservedBeforeA429(t *testing.T) {
	e := newEnv(t)
	const retryAfter = time.Second
	const onItsWay = 25 * time.Millisecond
	var (
		mu       sync.Mutex
		served   int
		told     time.Time // when the 429 was answered
		inside   []time.Duration
		afterEnd int
	)
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		served++
		switch {
		case served == 9:
			told = now
			w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
			w.WriteHeader(http.StatusTooManyRequests)
		case !told.IsZero() && now.Before(told.Add(retryAfter)):
			if now.Sub(told) > onItsWay {
				inside = append(inside, now.Sub(told))
			}
			w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
			w.WriteHeader(http.StatusTooManyRequests)
		case !told.IsZero():
			afterEnd++
		}
	})
	cfg := httplimit.TransportConfig{Name: "fleet", Rate: limiter.Rate{Events: 30, Per: time.Second, Burst: 1}, AcquireTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	start := time.Now()
	for _, lc := range []*limiter.Client{e.lc, e.other(t)} {
		hc := httpClient(t, transport(t, lc, cfg))
		for range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(start) < 2*time.Second {
					resp, err := hc.Get(up.URL)
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
				}
			}()
		}
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if told.IsZero() {
		t.Fatal("the upstream never answered 429")
	}
	for _, d := range inside {
		t.Errorf("a request reached the upstream %v after its 429, inside the Retry-After of %v", d.Round(time.Millisecond), retryAfter)
	}
	if afterEnd < 5 {
		t.Errorf("%d requests after the Retry-After, want the rate's", afterEnd)
	}
	t.Logf("%d requests; %d inside the Retry-After, %d after it", served, len(inside), afterEnd)
}
