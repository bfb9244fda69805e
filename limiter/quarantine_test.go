package limiter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// A Redis restarted empty forgets a lease whose holder still believes in
// it. The restart quarantine keeps the permits from a second holder until
// the first has learned of its loss.
func TestRestartQuarantineKeepsForgottenLeases(t *testing.T) {
	const ttl = 2 * time.Second
	srv := redistest.StartServer(t)
	// Every Client keeps the default quarantine: the TTL.
	holderClient := redistest.Limiter(t, srv.Client(t), limiter.TTL(ttl), limiter.RestartQuarantine(ttl))
	otherClient := redistest.Limiter(t, srv.Client(t), limiter.TTL(ttl), limiter.RestartQuarantine(ttl))

	holderMutex, err := holderClient.Mutex("job")
	if err != nil {
		t.Fatal(err)
	}
	// The server is new: even its first grant waits for the quarantine.
	start := time.Now()
	held, err := holderMutex.Acquire(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("a server up for less than its quarantine granted after %v", waited)
	}

	srv.Restart(t)
	restarted := time.Now()

	other, err := otherClient.Mutex("job")
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.TryAcquire(ctxT(t, 5*time.Second))
	var busy *limiter.BusyError
	// INFO tells the uptime in whole seconds: a second more to be sure.
	if !errors.As(err, &busy) || !busy.Restarted || busy.RetryIn <= 0 || busy.RetryIn > ttl+time.Second {
		t.Fatalf("TryAcquire on a restarted server: %v (%#v), want a BusyError with Restarted and RetryIn in (0, %v]", err, busy, ttl+time.Second)
	}

	lease, err := other.Acquire(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	defer lease.Release(ctxT(t, 5*time.Second))
	select {
	case <-held.Context().Done():
	default:
		t.Fatalf("a second holder was granted %v after the restart while the first still believed it held", granted.Sub(restarted))
	}
	if !errors.Is(held.Err(), limiter.ErrLeaseLost) {
		t.Errorf("the forgotten lease ended with %v, want ErrLeaseLost", held.Err())
	}
	t.Logf("granted again %v after the restart", granted.Sub(restarted).Round(time.Millisecond))

	// Past the quarantine, a name the server never saw is granted at once.
	fresh, err := otherClient.Mutex("another")
	if err != nil {
		t.Fatal(err)
	}
	l, err := fresh.TryAcquire(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatalf("a new name after the quarantine: %v", err)
	}
	l.Release(ctxT(t, 5*time.Second))
}

// With the quarantine off (a test server, or AOF with appendfsync always),
// a new server grants at once.
func TestRestartQuarantineOff(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redistest.Limiter(t, srv.Client(t), limiter.RestartQuarantine(0))
	m, err := c.Mutex("job")
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.TryAcquire(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire with RestartQuarantine(0) on a new server: %v", err)
	}
	l.Release(ctxT(t, 5*time.Second))
}
