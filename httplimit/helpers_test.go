package httplimit_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// env is one test's Redis and the limiter Client the code under test uses.
type env struct {
	srv *redistest.Server
	rdb *redis.Client
	lc  *limiter.Client
}

func newEnv(t *testing.T, opts ...limiter.Option) env {
	t.Helper()
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	return env{srv: srv, rdb: rdb, lc: redistest.Limiter(t, rdb, opts...)}
}

// other is a second limiter Client on the same Redis: another process,
// as far as the semaphores can tell. Tests use it to hold permits and to
// look at the semaphores.
func (e env) other(t *testing.T) *limiter.Client {
	t.Helper()
	return redistest.Limiter(t, e.rdb)
}

func sem(t *testing.T, c *limiter.Client, name string, limit int64, opts ...limiter.NameOption) *limiter.Semaphore {
	t.Helper()
	s, err := c.Semaphore(name, limit, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// holders lists the live leases of name as c's Inspector reads them.
func holders(t *testing.T, c *limiter.Client, name string) []inspect.Holder {
	t.Helper()
	hs, err := inspect.New(c).Holders(ctxT(t, 5*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// evict removes every lease of name from Redis behind its holder's back,
// through c, so that its holder's next refresh finds it gone.
func evict(t *testing.T, c *limiter.Client, name string) {
	t.Helper()
	hs := holders(t, c, name)
	if len(hs) == 0 {
		t.Fatal("no lease to evict")
	}
	s := sem(t, c, name, 1<<40) // the largest limit: ReleaseTicket refuses a ticket heavier than it
	for _, h := range hs {
		tk := limiter.Ticket{Name: name, ID: h.ID, Weight: h.Weight, Token: h.Token}
		if err := s.ReleaseTicket(ctxT(t, 5*time.Second), tk); err != nil {
			t.Fatal(err)
		}
	}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// noLeaks checks, after every cleanup registered later (servers, Clients)
// has run, that the test left no goroutine behind.
func noLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// httpClient is an http.Client on its own connection pool with rt (or a
// plain transport) on top, whose idle connections are closed at cleanup.
func httpClient(t *testing.T, rt http.RoundTripper) *http.Client {
	c := &http.Client{Transport: rt}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func newBase(t *testing.T) *http.Transport {
	b := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(b.CloseIdleConnections)
	return b
}
