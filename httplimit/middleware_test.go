package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redsem/redsem/httplimit"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

func middleware(t *testing.T, lc *limiter.Client, cfg httplimit.ServerConfig, h http.HandlerFunc, opts ...httplimit.Option) *httptest.Server {
	t.Helper()
	mw, err := httplimit.Middleware(lc, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(mw(h))
	t.Cleanup(s.Close)
	return s
}

func get(t *testing.T, c *http.Client, url string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 20*time.Second), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// Many concurrent requests; the handlers in at once, counted by the
// handler itself, never exceed the limit, and every request is served.
func TestMiddlewareCapHolds(t *testing.T) {
	e := newEnv(t)
	var c redistest.Gauge
	var noLease sync.Once
	srv := middleware(t, e.lc, httplimit.ServerConfig{Name: "cap", Limit: 3, AcquireTimeout: 10 * time.Second},
		func(w http.ResponseWriter, r *http.Request) {
			c.Enter()
			defer c.Leave()
			if l, ok := limiter.LeaseFrom(r.Context()); !ok || l.Weight() != 1 {
				noLease.Do(func() { t.Error("no lease of weight 1 in the request's context") })
			}
			time.Sleep(20 * time.Millisecond)
		})
	hc := httpClient(t, nil)
	var wg sync.WaitGroup
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := hc.Get(srv.URL)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("status %d", resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	if p := c.Peak(); p > 3 || p < 2 {
		t.Fatalf("peak of %d handlers at once with a limit of 3 (2 or 3 expected)", p)
	}
	if n := c.Total(); n != 24 {
		t.Fatalf("%d requests served, want 24", n)
	}
	if hs := holders(t, e.lc, "cap"); len(hs) != 0 {
		t.Fatalf("permits still held after every request was answered: %v", hs)
	}
}

// A full semaphore: 429 (or BusyStatus) with Retry-After, the handler
// never runs; a permit that frees within AcquireTimeout lets the request in.
func TestMiddlewareBusy(t *testing.T) {
	e := newEnv(t)
	// Another process holds the one permit; its lease expires within 3s
	// unless refreshed, so Retry-After must say 1 to 3 seconds.
	holder := sem(t, e.other(t), "busy", 1, limiter.TTL(3*time.Second))
	lease, err := holder.Acquire(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var ran sync.WaitGroup
	handler := func(w http.ResponseWriter, r *http.Request) { ran.Done() }
	hc := httpClient(t, nil)
	for _, tc := range []struct {
		cfg    httplimit.ServerConfig
		status int
	}{
		{httplimit.ServerConfig{Name: "busy", Limit: 1, AcquireTimeout: 100 * time.Millisecond}, http.StatusTooManyRequests},
		{httplimit.ServerConfig{Name: "busy", Limit: 1, AcquireTimeout: 100 * time.Millisecond, BusyStatus: http.StatusServiceUnavailable}, http.StatusServiceUnavailable},
		// Negative AcquireTimeout: answered at once, not after the default AcquireTimeout.
		{httplimit.ServerConfig{Name: "busy", Limit: 1, AcquireTimeout: -1}, http.StatusTooManyRequests},
	} {
		srv := middleware(t, e.lc, tc.cfg, handler)
		start := time.Now()
		resp := get(t, hc, srv.URL)
		took := time.Since(start)
		if resp.StatusCode != tc.status {
			t.Fatalf("%+v: status %d, want %d", tc.cfg, resp.StatusCode, tc.status)
		}
		secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil || secs < 1 || secs > 3 {
			t.Fatalf("%+v: Retry-After %q, want 1..3 seconds", tc.cfg, resp.Header.Get("Retry-After"))
		}
		if tc.cfg.AcquireTimeout > 0 && took < tc.cfg.AcquireTimeout {
			t.Fatalf("%+v: answered after %v, before AcquireTimeout", tc.cfg, took)
		}
		if tc.cfg.AcquireTimeout < 0 && took > 2*time.Second {
			t.Fatalf("negative AcquireTimeout: answered after %v", took)
		}
	}

	// A wait that the release ends is served.
	srv := middleware(t, e.lc, httplimit.ServerConfig{Name: "busy", Limit: 1, AcquireTimeout: 10 * time.Second}, handler)
	ran.Add(1) // only this request may reach the handler
	go func() {
		time.Sleep(100 * time.Millisecond)
		lease.Release(ctxT(t, 5*time.Second))
	}()
	if resp := get(t, hc, srv.URL); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d after the permit freed within AcquireTimeout", resp.StatusCode)
	}
	ran.Wait()
}

// The permit is released before a panic goes on, and the panic goes on.
func TestMiddlewarePanicReleasesAndPropagates(t *testing.T) {
	noLeaks(t)
	e := newEnv(t)
	mw, err := httplimit.Middleware(e.lc, httplimit.ServerConfig{Name: "panic", Limit: 1, AcquireTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := limiter.LeaseFrom(r.Context()); !ok {
			t.Error("no lease in the panicking handler's context")
		}
		panic(boom)
	}))
	observer := e.other(t)
	for range 2 { // the second would be answered 429 if the first kept its permit
		func() {
			defer func() {
				if got := recover(); got != boom {
					t.Fatalf("recovered %v, want the handler's panic", got)
				}
				if hs := holders(t, observer, "panic"); len(hs) != 0 {
					t.Fatalf("permit still held after the handler panicked: %v", hs)
				}
			}()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
			t.Fatal("the panic did not propagate")
		}()
	}
}

// A lost lease cancels the request's context with cause ErrLeaseLost.
func TestMiddlewareLostLeaseCancelsRequest(t *testing.T) {
	e := newEnv(t)
	started := make(chan struct{})
	cause := make(chan error, 1)
	srv := middleware(t, e.lc, httplimit.ServerConfig{Name: "lost", Limit: 1},
		func(w http.ResponseWriter, r *http.Request) {
			close(started)
			select {
			case <-r.Context().Done():
				cause <- context.Cause(r.Context())
			case <-time.After(10 * time.Second):
				cause <- errors.New("not cancelled within 10s")
			}
		}, httplimit.LimiterOptions(limiter.TTL(600*time.Millisecond)))
	hc := httpClient(t, nil)
	go func() {
		if resp, err := hc.Get(srv.URL); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	evict(t, e.other(t), "lost")
	if err := <-cause; !errors.Is(err, limiter.ErrLeaseLost) {
		t.Fatalf("request context cause %v, want ErrLeaseLost", err)
	}
}

// Key picks a semaphore per key (or none), Weight the permits taken.
func TestMiddlewareKeyAndWeight(t *testing.T) {
	e := newEnv(t)
	inA := make(chan struct{})
	leave := make(chan struct{})
	var gated sync.Map // path -> whether the handler ran under a lease
	srv := middleware(t, e.lc, httplimit.ServerConfig{
		Name: "tenant", Limit: 2, AcquireTimeout: -1,
		Key: func(r *http.Request) (string, bool) {
			k := r.Header.Get("X-Key")
			return k, k != ""
		},
		Weight: func(r *http.Request) int64 {
			w, err := strconv.ParseInt(r.Header.Get("X-Weight"), 10, 64)
			if err != nil {
				return 1
			}
			return w
		},
	}, func(w http.ResponseWriter, r *http.Request) {
		_, ok := limiter.LeaseFrom(r.Context())
		gated.Store(r.URL.Path, ok)
		if r.URL.Path == "/hold" {
			close(inA)
			select {
			case <-leave:
			case <-r.Context().Done(): // the test failed
			}
		}
	})
	hc := httpClient(t, nil)
	held := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctxT(t, 20*time.Second), http.MethodGet, srv.URL+"/hold", nil)
		req.Header.Set("X-Key", "a")
		req.Header.Set("X-Weight", "2")
		resp, err := hc.Do(req)
		if err != nil {
			held <- 0
			return
		}
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	<-inA
	observer := e.other(t)
	if hs := holders(t, observer, "tenant:a"); len(hs) != 1 || hs[0].Weight != 2 {
		t.Fatalf("tenant:a holders %v, want one lease of weight 2", hs)
	}
	for _, tc := range []struct {
		path, key, weight string
		status            int
		gated             bool
	}{
		{"/a", "a", "1", http.StatusTooManyRequests, false}, // a is full
		{"/b", "b", "2", http.StatusOK, true},               // b has its own permits
		{"/none", "", "", http.StatusOK, false},             // Key declined: not gated
		{"/heavy", "b", "3", http.StatusInternalServerError, false},
		{"/zero", "b", "0", http.StatusInternalServerError, false},
	} {
		if got := get(t, hc, srv.URL+tc.path, "X-Key", tc.key, "X-Weight", tc.weight).StatusCode; got != tc.status {
			t.Fatalf("%s: status %d, want %d", tc.path, got, tc.status)
		}
		if g, ran := gated.Load(tc.path); ran && g.(bool) != tc.gated {
			t.Fatalf("%s: ran under a lease: %v, want %v", tc.path, g, tc.gated)
		} else if !ran && tc.status == http.StatusOK {
			t.Fatalf("%s: the handler did not run", tc.path)
		}
	}
	close(leave)
	if s := <-held; s != http.StatusOK {
		t.Fatalf("/hold: status %d", s)
	}
	if hs := holders(t, observer, "tenant:a"); len(hs) != 0 {
		t.Fatalf("tenant:a still held after its request ended: %v", hs)
	}
}

// A client that gives up while its request waits leaves no permit held
// and no place in the queue: once the holder releases, another process
// gets the permit without waiting, and the handler never runs.
func TestMiddlewareClientGoneWhileWaiting(t *testing.T) {
	e := newEnv(t)
	holder := sem(t, e.other(t), "gone", 1)
	lease, err := holder.Acquire(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	srv := middleware(t, e.lc, httplimit.ServerConfig{Name: "gone", Limit: 1, AcquireTimeout: time.Minute},
		func(w http.ResponseWriter, r *http.Request) { ran <- struct{}{} })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	if resp, err := httpClient(t, nil).Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("status %d for a request whose client gave up", resp.StatusCode)
	}
	// The server learns of the disconnect asynchronously: its wait must
	// have left the queue before the release, or the release grants it.
	redistest.Eventually(t, 5*time.Second, "the server's wait gone from the queue", func() bool {
		ws, err := inspect.New(e.lc).Waiters(ctxT(t, 5*time.Second), "gone")
		return err == nil && len(ws) == 0
	})
	if err := lease.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	// TryAcquire fails while anyone holds the permit or waits ahead. The
	// server learns of the disconnect asynchronously, hence Eventually.
	var next *limiter.Lease
	redistest.Eventually(t, 5*time.Second, "the permit is free and nobody waits", func() bool {
		next, err = holder.TryAcquire(ctxT(t, 5*time.Second))
		return err == nil
	})
	defer next.Release(ctxT(t, 5*time.Second))
	select {
	case <-ran:
		t.Fatal("the handler ran for a request whose client gave up")
	case <-time.After(50 * time.Millisecond):
	}
}

func TestBadConfig(t *testing.T) {
	e := newEnv(t)
	// Each bad argument is a *limiter.ArgumentError naming the config's
	// field, or the option.
	check := func(what string, err error, arg string) {
		t.Helper()
		var ae *limiter.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != arg || !errors.Is(err, limiter.ErrInvalidArgument) {
			t.Fatalf("%s: %v, want a *limiter.ArgumentError naming %s", what, err, arg)
		}
	}
	for _, tc := range []struct {
		cfg   httplimit.ServerConfig
		field string
	}{
		{httplimit.ServerConfig{Limit: 1}, "Name"},
		{httplimit.ServerConfig{Name: "x"}, "Limit"},
		{httplimit.ServerConfig{Name: "x", Limit: -1}, "Limit"},
		{httplimit.ServerConfig{Name: "x", Limit: 1, BusyStatus: 200}, "BusyStatus"},
		{httplimit.ServerConfig{Name: "x", Limit: 1, BusyStatus: 600}, "BusyStatus"},
	} {
		_, err := httplimit.Middleware(e.lc, tc.cfg)
		check(fmt.Sprintf("Middleware(%+v)", tc.cfg), err, tc.field)
	}
	for _, tc := range []struct {
		cfg   httplimit.TransportConfig
		field string
	}{
		{httplimit.TransportConfig{Limit: 1}, "Name"},
		{httplimit.TransportConfig{Name: "x", Limit: 0}, "Limit"},
		{httplimit.TransportConfig{Name: "x", Limit: 1 << 50}, "Limit"},
	} {
		_, err := httplimit.NewTransport(e.lc, tc.cfg)
		check(fmt.Sprintf("NewTransport(%+v)", tc.cfg), err, tc.field)
	}
	_, err := httplimit.Middleware(nil, httplimit.ServerConfig{Name: "x", Limit: 1})
	check("Middleware, nil client", err, "client")
	_, err = httplimit.NewTransport(nil, httplimit.TransportConfig{Name: "x", Limit: 1})
	check("NewTransport, nil client", err, "client")
	// A bad limiter option is reported now, not per request.
	_, err = httplimit.Middleware(e.lc, httplimit.ServerConfig{Name: "x", Limit: 1}, httplimit.LimiterOptions(limiter.TTL(-1)))
	check("Middleware, bad TTL", err, "TTL")
	_, err = httplimit.NewTransport(e.lc, httplimit.TransportConfig{Name: "x", Limit: 1}, httplimit.LimiterOptions(limiter.TTL(-1)))
	check("NewTransport, bad TTL", err, "TTL")
	closed, err := limiter.New(e.rdb)
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := httplimit.Middleware(closed, httplimit.ServerConfig{Name: "x", Limit: 1}); !errors.Is(err, limiter.ErrClosed) {
		t.Fatalf("closed client: %v", err)
	}
}

// A weight above a fleet-wide limit stored with SetLimit can never be
// served: 500 at once, not a wait, and the handler does not run.
func TestMiddlewareWeightAboveFleetLimit(t *testing.T) {
	e := newEnv(t)
	if err := inspect.New(e.other(t)).SetLimit(ctxT(t, 5*time.Second), "fleet", 1); err != nil {
		t.Fatal(err)
	}
	srv := middleware(t, e.lc, httplimit.ServerConfig{Name: "fleet", Limit: 3, AcquireTimeout: 10 * time.Second,
		Weight: func(*http.Request) int64 { return 2 }},
		func(w http.ResponseWriter, r *http.Request) { t.Error("the handler ran") })
	start := time.Now()
	if got := get(t, httpClient(t, nil), srv.URL).StatusCode; got != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", got)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("answered after %v: it waited", d)
	}
}
