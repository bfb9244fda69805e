package httplimit

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// The semaphore cache reuses an entry while it is used and drops entries
// idle for longer than its idle time, so request-derived keys do not grow
// it without bound.
func TestSemaphoreCacheEvictsIdle(t *testing.T) {
	lc := redistest.Limiter(t, redistest.StartServer(t).Client(t))
	s := newSemaphores(lc, 2, nil)
	s.idle = 100 * time.Millisecond
	a, err := s.get("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.get("b"); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.get("a"); again != a {
		t.Fatal("a cached semaphore was made again")
	}
	if n := s.len(); n != 2 {
		t.Fatalf("%d cached, want 2", n)
	}
	time.Sleep(60 * time.Millisecond)
	s.get("a") // keeps a fresh
	time.Sleep(60 * time.Millisecond)
	if _, err := s.get("c"); err != nil { // sweeps: b idle > 100ms, a not
		t.Fatal(err)
	}
	if n := s.len(); n != 2 {
		t.Fatalf("%d cached after b went idle, want 2 (a and c)", n)
	}
	if again, _ := s.get("a"); again != a {
		t.Fatal("a semaphore in use was evicted")
	}
	if err := lc.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.get("d"); err != limiter.ErrClosed {
		t.Fatalf("after Close: %v, want limiter.ErrClosed", err)
	}
}

// A full cache hands out semaphores without caching them.
func TestSemaphoreCacheIsCapped(t *testing.T) {
	lc := redistest.Limiter(t, redistest.StartServer(t).Client(t))
	s := newSemaphores(lc, 1, nil)
	s.max = 2
	for _, name := range []string{"a", "b", "c", "d"} {
		if sem, err := s.get(name); err != nil || sem.Name() != name {
			t.Fatalf("get(%s): %v, %v", name, sem, err)
		}
	}
	if n := s.len(); n != 2 {
		t.Fatalf("%d cached with a cap of 2", n)
	}
	a, _ := s.get("a")
	if again, _ := s.get("a"); again != a {
		t.Fatal("a cached semaphore was made again")
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
