package httplimit

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// The gate cache reuses an entry (its semaphore and rate limit) while it
// is used and drops entries idle for longer than its idle time, so
// request-derived keys do not grow it without bound.
func TestGateCacheEvictsIdle(t *testing.T) {
	lc := redistest.Limiter(t, redistest.StartServer(t).Client(t))
	s := newGates(lc, 2, limiter.Rate{Events: 1, Per: time.Second, Burst: 1}, nil, nil)
	s.idle = 400 * time.Millisecond // with 150ms of slack either way below, for a loaded machine
	a, err := s.get("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.get("b"); err != nil {
		t.Fatal(err)
	}
	if a.sem == nil || a.rl == nil {
		t.Fatalf("gate %+v, want a semaphore and a rate limit", a)
	}
	if again, _ := s.get("a"); again != a {
		t.Fatal("a cached gate was made again")
	}
	if n := s.len(); n != 2 {
		t.Fatalf("%d cached, want 2", n)
	}
	time.Sleep(250 * time.Millisecond)
	s.get("a") // keeps a fresh
	time.Sleep(250 * time.Millisecond)
	if _, err := s.get("c"); err != nil { // sweeps: b idle > 400ms, a not
		t.Fatal(err)
	}
	if n := s.len(); n != 2 {
		t.Fatalf("%d cached after b went idle, want 2 (a and c)", n)
	}
	if again, _ := s.get("a"); again != a {
		t.Fatal("a gate in use was evicted")
	}
	if err := lc.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.get("d"); err != limiter.ErrClosed {
		t.Fatalf("after Close: %v, want limiter.ErrClosed", err)
	}
}

// A full cache hands out gates without caching them.
func TestGateCacheIsCapped(t *testing.T) {
	lc := redistest.Limiter(t, redistest.StartServer(t).Client(t))
	s := newGates(lc, 1, limiter.Rate{}, nil, nil)
	s.max = 2
	for _, name := range []string{"a", "b", "c", "d"} {
		if g, err := s.get(name); err != nil || g.sem.Name() != name || g.rl != nil {
			t.Fatalf("get(%s): %+v, %v", name, g, err)
		}
	}
	if n := s.len(); n != 2 {
		t.Fatalf("%d cached with a cap of 2", n)
	}
	a, _ := s.get("a")
	if again, _ := s.get("a"); again != a {
		t.Fatal("a cached gate was made again")
	}
}

func TestHostKey(t *testing.T) {
	for url, want := range map[string]string{
		"http://Example.COM/x":        "example.com:80",
		"http://example.com:80/":      "example.com:80",
		"https://api.example.com":     "api.example.com:443",
		"https://api.example.com:443": "api.example.com:443",
		"http://127.0.0.1:8080/":      "127.0.0.1:8080",
		"http://[::1]/":               "[::1]:80",
	} {
		if got, ok := hostKey(httptest.NewRequest("GET", url, nil)); !ok || got != want {
			t.Errorf("hostKey(%s) = %q, %v; want %q", url, got, ok, want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                       "1", // never "retry at once"
		-time.Second:            "1",
		time.Millisecond:        "1",
		time.Second:             "1",
		1500 * time.Millisecond: "2", // rounded up: not before the hint
		10 * time.Second:        "10",
	} {
		if got := retryAfter(d); got != want {
			t.Errorf("retryAfter(%v) = %s, want %s", d, got, want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	for h, want := range map[string]time.Duration{
		"2":                             2 * time.Second,
		"0":                             0, // over already: no pause
		"Fri, 27 Nov 2026 09:00:30 GMT": 30 * time.Second,
		"Fri, 27 Nov 2026 08:59:00 GMT": 0, // past
		"99999999999999999999":          0, // not a uint63: malformed
		"999999999999":                  maxPause + time.Second,
		"":                              0,
		"soon":                          0,
		"-5":                            0,
		"+5":                            0,
		"1.5":                           0,
	} {
		d, ok := parseRetryAfter(h, now)
		if d != want && ok || ok != (want > 0) {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v", h, d, ok, want)
		}
	}
}
