package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redsem/redsem/dashboard"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

const (
	testPrefix = "dash-test:"
	testToken  = "s3cret-token-for-tests"
	// testInterval is the sampler's in the tests: quick, so that the
	// tests wait little.
	testInterval = 100 * time.Millisecond
)

// TestMain runs a child process when asked to (the browser tests' holder),
// else the tests and the Example, against a redis-server of its own; then
// checks that no goroutine outlived them.
func TestMain(m *testing.M) {
	redistest.Children(map[string]func() int{"holder": runHolder})
	addr, stop, err := redistest.StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("REDIS_ADDR", addr)
	code := m.Run()
	stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// fixture is a real redis-server, a limiter Client of an application that
// holds leases in it (app), and a dashboard of another Client, served by
// an httptest server.
type fixture struct {
	srv  *redistest.Server
	app  *limiter.Client
	dash *dashboard.Dashboard
	http *httptest.Server
	ctx  context.Context
}

func newFixture(t *testing.T, opts ...dashboard.Option) *fixture {
	t.Helper()
	srv := redistest.StartServer(t)
	f := &fixture{srv: srv, app: redistest.Limiter(t, srv.Client(t), limiter.Prefix(testPrefix))}
	c := redistest.Limiter(t, srv.Client(t), limiter.Prefix(testPrefix))
	d, err := dashboard.New(c, append([]dashboard.Option{dashboard.Interval(testInterval)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	f.dash = d
	f.http = httptest.NewServer(d)
	t.Cleanup(func() { f.http.Close(); d.Close() }) // before the Clients close
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	f.ctx = ctx
	return f
}

func (f *fixture) sem(t *testing.T, name string, limit int64, opts ...limiter.NameOption) *limiter.Semaphore {
	t.Helper()
	s, err := f.app.Semaphore(name, limit, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// hold acquires a lease with that id and weight, or fails the test.
func (f *fixture) hold(t *testing.T, s *limiter.Semaphore, id string, weight int64) *limiter.Lease {
	t.Helper()
	l, err := s.TryAcquire(f.ctx, limiter.ID(id), limiter.Weight(weight))
	if err != nil {
		t.Fatalf("acquire %s/%s: %v", s.Name(), id, err)
	}
	return l
}

// queue starts a waiting Acquire of weight on s and returns once it is in
// the queue; it waits until the test ends.
func (f *fixture) queue(t *testing.T, s *limiter.Semaphore, weight int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	in := inspect.New(f.app)
	before, err := in.Waiters(f.ctx, s.Name())
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if l, err := s.Acquire(ctx, limiter.Weight(weight)); err == nil {
			_ = l.Release(context.Background())
		}
	}()
	redistest.Eventually(t, 5*time.Second, "a waiter in the queue", func() bool {
		ws, err := in.Waiters(f.ctx, s.Name())
		return err == nil && len(ws) == len(before)+1
	})
}

// get fetches path from the dashboard and returns its status and body.
func (f *fixture) get(t *testing.T, path string) (int, string) {
	t.Helper()
	res, err := http.Get(f.http.URL + "/" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// post sends form to path with the headers, and returns status and body.
func (f *fixture) post(t *testing.T, path string, form url.Values, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.http.URL+"/"+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// eventually fetches path until cond holds of its body.
func (f *fixture) eventually(t *testing.T, path, what string, cond func(body string) bool) string {
	t.Helper()
	var body string
	redistest.Eventually(t, 15*time.Second, what, func() bool {
		_, body = f.get(t, path)
		return cond(body)
	})
	return body
}
