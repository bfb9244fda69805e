package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// rawConn is one RESP connection through a proxy, written and read by
// hand so the test sees exactly what passes.
type rawConn struct {
	t  testing.TB
	c  net.Conn
	rd *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{t: t, c: c, rd: bufio.NewReader(c)}
}

func (r *rawConn) send(args ...string) {
	r.t.Helper()
	if _, err := io.WriteString(r.c, encode(args...)); err != nil {
		r.t.Fatal(err)
	}
}

// reply reads one reply, giving up after d.
func (r *rawConn) reply(d time.Duration) (string, error) {
	_ = r.c.SetReadDeadline(time.Now().Add(d))
	return readReply(r.rd)
}

// clients counts the server's client connections (the query's own too).
func clients(t testing.TB, s *Server) int {
	t.Helper()
	list, err := s.command(time.Second, "CLIENT", "LIST")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(list, "\n")
}

func TestProxyForwards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := StartServer(t)
	p := StartProxy(t, s.Addr())
	c := s.Client(t, func(o *redis.Options) { o.Addr = p.Addr() })
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := s.command(time.Second, "GET", "k"); err != nil || v != "v" {
		t.Fatalf("GET k on the server = %q, %v", v, err)
	}
}

// Blackhole holds bytes both ways on open connections and keeps new
// connections from the server; Heal delivers what was held, in order.
func TestProxyBlackholeAndHeal(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	p := StartProxy(t, s.Addr())
	open := dialRaw(t, p.Addr())
	open.send("PING")
	if r, err := open.reply(time.Second); r != "PONG" {
		t.Fatalf("PING through the proxy: %q, %v", r, err)
	}
	before := clients(t, s)

	p.Blackhole()
	open.send("SET", "a", "1")
	late := dialRaw(t, p.Addr()) // accepted while blackholed
	late.send("SET", "b", "1")
	var ne net.Error
	if _, err := open.reply(300 * time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("reply through a blackhole: want a timeout, got %v", err)
	}
	if _, err := late.reply(50 * time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("reply on a connection made during a blackhole: want a timeout, got %v", err)
	}
	if n, _ := s.command(time.Second, "EXISTS", "a", "b"); n != "0" {
		t.Fatalf("%s of the held SETs reached the server", n)
	}
	if n := clients(t, s); n != before {
		t.Fatalf("the server has %d clients, %d before: a connection reached it across the blackhole", n, before)
	}

	p.Heal()
	for name, c := range map[string]*rawConn{"open": open, "late": late} {
		if r, err := c.reply(2 * time.Second); r != "OK" {
			t.Fatalf("%s connection after Heal: %q, %v", name, r, err)
		}
	}
	if n, _ := s.command(time.Second, "EXISTS", "a", "b"); n != "2" {
		t.Fatalf("after Heal %s of 2 held SETs reached the server", n)
	}
}

// Reset sends an RST to both sides of every connection, ends a
// blackhole, and new connections work.
func TestProxyReset(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	base := clients(t, s) - 1 // without the query's own connection
	p := StartProxy(t, s.Addr())
	c := dialRaw(t, p.Addr())
	c.send("PING")
	if r, err := c.reply(time.Second); r != "PONG" {
		t.Fatalf("PING: %q, %v", r, err)
	}
	p.Blackhole()
	p.Reset()
	if _, err := c.reply(time.Second); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after Reset: want ECONNRESET, got %v", err)
	}
	Eventually(t, 2*time.Second, "the server's side closed", func() bool { return clients(t, s)-1 == base })
	again := dialRaw(t, p.Addr())
	again.send("PING")
	if r, err := again.reply(time.Second); r != "PONG" {
		t.Fatalf("PING on a new connection after Reset: %q, %v", r, err)
	}
}

// Cleanup ends every goroutine, with connections still open on both
// sides (the clients' outlive the proxy), forwarding or held in a
// blackhole.
func TestProxyCleanupLeavesNoGoroutines(t *testing.T) {
	s := StartServer(t)
	ignore := goleak.IgnoreCurrent()
	for _, blackhole := range []bool{false, true} {
		t.Run(fmt.Sprint("blackhole=", blackhole), func(inner *testing.T) {
			p := StartProxy(inner, s.Addr())
			c := dialRaw(t, p.Addr()) // closed by t, after the proxy
			c.send("PING")
			if r, err := c.reply(time.Second); r != "PONG" {
				inner.Fatalf("PING: %q, %v", r, err)
			}
			if blackhole {
				p.Blackhole()
				c.send("PING")                    // held in a forwarder
				dialRaw(t, p.Addr()).send("PING") // held before the dial
			}
		})
	}
	goleak.VerifyNone(t, ignore)
}
