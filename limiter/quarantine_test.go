package limiter_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// A Redis restarted empty forgets a lease whose holder still believes in
// it. The restart quarantine keeps the permits from a second holder until
// the first has learned of its loss.
func TestRestartQuarantineKeepsForgottenLeases(t *testing.T) {
	t.Parallel()
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
	// Each name's quarantine ends the TTL after the server's start or its
	// first sight of the name, whichever is earlier; INFO knows the start
	// to the second: a name first seen now waits until at most a second
	// past the start plus the TTL.
	time.Sleep(time.Until(restarted.Add(ttl + time.Second)))
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

// A fresh Redis (an integration test's, a new deployment's) with default
// options: the first Acquire waits the quarantine out (TTL 10s, and up to
// a second of INFO's rounding) rather than failing at a 10s AcquireTimeout,
// and the Client says so once, at Info, with how to turn it off.
func TestFreshRedisFirstAcquireWaitsTheQuarantineOut(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	var logs syncBuffer
	c, err := limiter.New(srv.Client(t), limiter.Logger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	mu, err := c.Mutex("first")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mu.TryAcquire(ctxT(t, time.Second)); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("TryAcquire on a server younger than the quarantine: %v, want ErrBusy", err)
	}
	l, err := mu.Acquire(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatalf("the first Acquire on a fresh Redis, default options: %v", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "restart quarantine"); n != 1 {
		t.Fatalf("the quarantine was logged %d times, want once:\n%s", n, logs.String())
	}
}

// A wait that ends in the quarantine reports the time left from now, not
// from the attempt whose answer it kept.
func TestQuarantineBusyErrorIsCurrent(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	const quarantine, wait = 6 * time.Second, 1500 * time.Millisecond
	c := redistest.Limiter(t, srv.Client(t), limiter.RestartQuarantine(quarantine))
	mu, err := c.Mutex("current", limiter.AcquireTimeout(wait))
	if err != nil {
		t.Fatal(err)
	}
	_, err = mu.Acquire(ctxT(t, 10*time.Second))
	var busy *limiter.BusyError
	if !errors.As(err, &busy) || !busy.Restarted {
		t.Fatalf("Acquire in the quarantine: %v, want a BusyError with Restarted", err)
	}
	// Up to a second of INFO's rounding. The wait's one attempt (the head
	// sleeps 2s between tries) answered at its start.
	if most := quarantine + time.Second - wait + 200*time.Millisecond; busy.RetryIn > most {
		t.Fatalf("after %v, the error says the quarantine ends in %v: more than the %v left", wait, busy.RetryIn, most)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
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

// restartEarlyInASecond restarts srv just after a wall-clock second began:
// INFO then tells an uptime of 0 for most of a second, the young server
// whose age the quarantine used to take up to a second short. before is
// taken before the stop, after once the server answers.
func restartEarlyInASecond(t *testing.T, srv *redistest.Server) (before, after time.Time) {
	t.Helper()
	now := time.Now()
	time.Sleep(now.Truncate(time.Second).Add(time.Second + 10*time.Millisecond).Sub(now))
	before = time.Now()
	srv.Restart(t)
	return before, time.Now()
}

// A rate on a fresh (or restarted) Redis takes its burst to have been
// spent just before the start: the first event waits the burst's refill
// (100ms here) from the start, not a second more for INFO's rounding.
func TestFreshRedisRateWaitsOnlyTheBurstRefill(t *testing.T) {
	srv := redistest.StartServer(t)
	rl, err := redistest.Limiter(t, srv.Client(t), limiter.RestartQuarantine(10*time.Second)).
		RateLimit("fresh", limiter.Rate{Events: 10, Per: time.Second, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	before, after := restartEarlyInASecond(t, srv)
	if err := rl.Wait(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	went := time.Now()
	t.Logf("the first event went %v after the restart began, %v after the server answered",
		went.Sub(before).Round(time.Millisecond), went.Sub(after).Round(time.Millisecond))
	if d := went.Sub(before); d < 100*time.Millisecond-2*time.Millisecond {
		t.Errorf("the first event went %v after the restart began, inside the burst's refill (100ms)", d)
	}
	if d := went.Sub(after); d > 150*time.Millisecond+100*time.Millisecond {
		t.Errorf("the first event went %v after the restart, want about the burst's refill (100ms)", d)
	}
}

// A lease the restart forgot keeps its permits for the TTL after the
// restart, and not much more: the quarantine ends on time.
func TestRestartQuarantineEndsOnTime(t *testing.T) {
	const ttl = 3 * time.Second
	srv := redistest.StartServer(t)
	holderClient := redistest.Limiter(t, srv.Client(t), limiter.TTL(ttl), limiter.RestartQuarantine(0))
	otherClient := redistest.Limiter(t, srv.Client(t), limiter.TTL(ttl), limiter.RestartQuarantine(ttl))
	holderMutex, err := holderClient.Mutex("ontime")
	if err != nil {
		t.Fatal(err)
	}
	held, err := holderMutex.TryAcquire(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	before, after := restartEarlyInASecond(t, srv)
	other, err := otherClient.Mutex("ontime", limiter.AcquireTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := other.Acquire(ctxT(t, 15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	defer l.Release(ctxT(t, 5*time.Second))
	t.Logf("granted %v after the restart began, %v after the server answered",
		granted.Sub(before).Round(time.Millisecond), granted.Sub(after).Round(time.Millisecond))
	if d := granted.Sub(before); d < ttl {
		t.Errorf("granted %v after the restart began, inside the TTL %v of the lease it forgot", d, ttl)
	}
	select {
	case <-held.Context().Done():
	default:
		t.Errorf("granted while the forgotten lease's holder still believed in it")
	}
	if d := granted.Sub(after); d > ttl+200*time.Millisecond+100*time.Millisecond {
		t.Errorf("granted %v after the restart, want about the TTL %v", d, ttl)
	}
}

// A wait behind another that outlasts the quarantine is not woken when the
// quarantine ends (the one ahead takes the permit): its error tells what
// blocked it when it gave up, a holder, not a quarantine over for seconds
// ("grants nothing new for 0s").
func TestTimedOutWaitAfterTheQuarantineSaysBusy(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	const quarantine = time.Second
	c := redistest.Limiter(t, srv.Client(t), limiter.TTL(5*time.Second), limiter.RestartQuarantine(quarantine))
	srv.Restart(t) // young: the quarantine is on
	first, err := c.Mutex("after", limiter.AcquireTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *limiter.Lease, 1)
	go func() {
		l, err := first.Acquire(ctxT(t, 15*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(100 * time.Millisecond) // first queues at the head
	second, err := c.Mutex("after", limiter.AcquireTimeout(quarantine+1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = second.Acquire(ctxT(t, 15*time.Second))
	if l := <-got; l != nil {
		defer l.Release(ctxT(t, 5*time.Second))
	}
	var busy *limiter.BusyError
	if !errors.As(err, &busy) || !errors.Is(err, limiter.ErrTimeout) {
		t.Fatalf("Acquire behind a holder: %v, want a BusyError with ErrTimeout", err)
	}
	t.Log(err)
	if busy.Restarted || strings.Contains(err.Error(), "RestartQuarantine") {
		t.Errorf("a wait that gave up %v after the quarantine ended blames it: %v", busy.Waited-quarantine, err)
	}
	if busy.InUse != 1 || busy.RetryIn <= 0 {
		t.Errorf("the error says %d in use, retry in %v; want the holder's 1 and a time to come", busy.InUse, busy.RetryIn)
	}
}

// A waiter behind the head has no timer: its last answer, long before it
// gave up, announced an expiry (the TTL) that has passed since, refreshed
// by the holder. The error is not "earliest expiry in 0s".
func TestTimedOutWaitBehindAnotherIsCurrent(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	const ttl = 500 * time.Millisecond
	c := redistest.Limiter(t, srv.Client(t), limiter.TTL(ttl))
	m, err := c.Mutex("behind", limiter.AcquireTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	held, err := m.TryAcquire(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctxT(t, 5*time.Second))
	done := make(chan struct{})
	go func() { // the head
		defer close(done)
		m.Acquire(ctxT(t, 10*time.Second))
	}()
	time.Sleep(100 * time.Millisecond)
	behind, err := c.Mutex("behind", limiter.AcquireTimeout(4*ttl))
	if err != nil {
		t.Fatal(err)
	}
	_, err = behind.Acquire(ctxT(t, 10*time.Second))
	var busy *limiter.BusyError
	if !errors.As(err, &busy) || !errors.Is(err, limiter.ErrTimeout) {
		t.Fatalf("Acquire behind a waiter and a holder: %v, want a BusyError with ErrTimeout", err)
	}
	t.Log(err)
	if busy.RetryIn <= 0 || strings.Contains(err.Error(), "expiry in 0s") {
		t.Errorf("the error says the earliest expiry is %v from now, though the holder refreshes its lease: %v", busy.RetryIn, err)
	}
	<-done
}
