package limiter_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// The core works through go-redis clients that speak TLS, pub/sub wake-ups
// included (issue 11).
func TestTLSCore(t *testing.T) {
	srv, conf := redistest.StartTLSServer(t)
	ctx := ctxT(t, 30*time.Second)

	// One client built by hand from the returned config, as an
	// application would, and one from Server.Client.
	holderRDB := redis.NewClient(&redis.Options{Addr: srv.Addr(), TLSConfig: conf})
	t.Cleanup(func() { _ = holderRDB.Close() })
	waiterRDB := srv.Client(t)

	// Without a plain port every connection below, the pub/sub one
	// included, is a TLS connection.
	cfg, err := holderRDB.ConfigGet(ctx, "*port").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, tlsPort, _ := net.SplitHostPort(srv.Addr())
	if cfg["port"] != "0" || cfg["tls-port"] != tlsPort {
		t.Fatalf("server listens on port=%q tls-port=%q, want 0 and %s", cfg["port"], cfg["tls-port"], tlsPort)
	}

	holder := redistest.Limiter(t, holderRDB)
	waiter := redistest.Limiter(t, waiterRDB)
	const name = "tls"
	hs, err := holder.Semaphore(name, 1, limiter.TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ws, err := waiter.Semaphore(name, 1, limiter.TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}

	held, err := hs.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ws.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("TryAcquire of a full semaphore: %v, want ErrBusy", err)
	}
	if err := held.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}

	type result struct {
		l  *limiter.Lease
		at time.Time
	}
	got := make(chan result, 1)
	start := time.Now()
	go func() {
		l, err := ws.Acquire(ctx)
		if err != nil {
			t.Errorf("Acquire: %v", err)
		}
		got <- result{l, time.Now()}
	}()
	redistest.Eventually(t, 10*time.Second, "waiter queued", func() bool {
		n, err := holderRDB.ZCard(ctx, queueKey(name)).Result()
		return err == nil && n == 1
	})
	if total, _ := pubsubConns(t, waiterRDB); total != 1 {
		t.Fatalf("%d pub/sub connections while waiting, want the waiter's one", total)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	r := <-got
	if r.l == nil {
		t.FailNow()
	}
	// As in testWaitingIsQuiet: the head waiter's fallback timer is at
	// least 2s, so an earlier grant was the release's wake-up message,
	// which only pub/sub carries across Clients.
	if d := r.at.Sub(start); d >= 1900*time.Millisecond {
		t.Fatalf("waiter acquired %v after it began waiting: woken by its timer, not by the release", d)
	}
	if err := r.l.Refresh(ctx); err != nil {
		t.Fatalf("Refresh of the woken lease: %v", err)
	}

	// Close gives the woken lease back over TLS.
	if err := waiter.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := r.l.Err(); !errors.Is(err, limiter.ErrNotHeld) {
		t.Fatalf("lease after Close: Err() = %v, want ErrNotHeld (released)", err)
	}
	if n, err := available(ctx, hs); err != nil || n != 1 {
		t.Fatalf("Available after Close = %d, %v; want 1", n, err)
	}
	if err := holder.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// The TLS server rejects a client that does not trust its CA and one that
// does not speak TLS, so TestTLSCore cannot have passed in the clear.
func TestTLSRejectsUntrustedAndPlainClients(t *testing.T) {
	srv, _ := redistest.StartTLSServer(t)
	ctx := ctxT(t, 10*time.Second)
	dial := func(o *redis.Options) {
		o.MaxRetries = -1
		o.DialTimeout = 2 * time.Second
		o.ReadTimeout = 2 * time.Second
	}

	untrusted := srv.Client(t, dial, func(o *redis.Options) { o.TLSConfig = &tls.Config{} })
	var unknown x509.UnknownAuthorityError
	if err := untrusted.Ping(ctx).Err(); !errors.As(err, &unknown) {
		t.Fatalf("PING without the CA: %v, want an unknown authority error", err)
	}
	sem, err := redistest.Limiter(t, untrusted).Semaphore("tls-untrusted", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx); !errors.As(err, &unknown) {
		t.Fatalf("TryAcquire without the CA: %v, want an unknown authority error", err)
	}

	plain := srv.Client(t, dial, func(o *redis.Options) { o.TLSConfig = nil })
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("PING in plain text succeeded on the TLS port")
	}
}

// Round-trip counts work on a TLS server as on a plain one: the stats
// helpers dial it with its config.
func TestTLSCommandCalls(t *testing.T) {
	srv, _ := redistest.StartTLSServer(t)
	ctx := ctxT(t, 10*time.Second)
	rdb := srv.Client(t)
	sem, err := redistest.Limiter(t, rdb).Semaphore("tls-stats", 1, limiter.TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// Loads the function library, so the counted acquire below is a plain
	// FCALL.
	warm, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if srv.CommandCalls(t)["fcall"] == 0 {
		t.Fatal("no fcall counted for an acquire and a release")
	}

	srv.ResetStats(t)
	if n := srv.CommandCalls(t)["fcall"]; n != 0 {
		t.Fatalf("fcall after ResetStats = %d, want 0", n)
	}
	l, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	calls := srv.CommandCalls(t)
	if calls["fcall"] != 1 || redistest.Scripts(calls) != 1 || calls["function|load"] != 0 {
		t.Fatalf("one acquire: %v; want one FCALL and nothing loaded", calls)
	}
}
