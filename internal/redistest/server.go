package redistest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startAttempts bounds retries when a freshly picked port is taken before
// redis-server binds it.
const startAttempts = 5

// Server is one real redis-server process owned by a test. Its address never
// changes, so clients keep working across Restart. All methods are safe for
// concurrent use.
type Server struct {
	port  int
	dir   string
	head  []string // first on the command line: a config file (see launch)
	extra []string
	// tls is set for servers from StartTLSServer, which listen on TLS only.
	tls *tls.Config

	// mu serialises Pause/Resume/Stop/Restart; it guards proc.
	mu   sync.Mutex
	proc *process // nil when stopped
}

// StartServer starts a redis-server on a free loopback port with no
// persistence and waits until it answers PING. extraArgs are appended to the
// command line (e.g. "--maxmemory", "10mb") and override the defaults.
//
// It fails the test with InstallHint when redis-server is missing, so a
// missing dependency can never pass as a green (skipped) run. The process is
// killed and its directory removed in t.Cleanup.
func StartServer(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	return startServer(t, false, nil, extraArgs, nil)
}

// StartNodes starts n independent servers, e.g. for multi-instance
// (Redlock-style) tests.
func StartNodes(t testing.TB, n int) []*Server {
	t.Helper()
	nodes := make([]*Server, n)
	for i := range nodes {
		nodes[i] = StartServer(t)
	}
	return nodes
}

// startServer picks a port (and with needBus a free cluster bus port), and
// retries with a new port when another process wins the race for it. head
// goes first on the command line (a config file, which redis-server only
// takes there). With conf the server is TLS-only and every helper
// connects with conf.
func startServer(t testing.TB, needBus bool, head, extra []string, conf *tls.Config) *Server {
	t.Helper()
	s := &Server{
		dir:   t.TempDir(), // removed after the kill below (cleanups run LIFO)
		head:  append([]string(nil), head...),
		extra: append([]string(nil), extra...),
		tls:   conf,
	}
	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		port, err := freePort(needBus)
		if err != nil {
			t.Fatal(err)
		}
		p, err := launch(port, s.dir, s.head, s.extra, s.tls)
		if errors.Is(err, errAddrInUse) {
			lastErr = err
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		s.port, s.proc = port, p
		t.Cleanup(func() {
			if err := s.stop(); err != nil {
				t.Error(err)
			}
		})
		if !slices.Contains(s.head, sentinelFlag) { // a sentinel has no CONFIG
			s.resetStats(t)
		}
		return s
	}
	t.Fatalf("redistest: could not bind a free port after %d attempts: %v", startAttempts, lastErr)
	return nil
}

// Addr returns "127.0.0.1:port". It is stable for the server's lifetime.
func (s *Server) Addr() string { return addrOf(s.port) }

// Client returns a new go-redis client for this server, closed in
// t.Cleanup. opts may adjust the options (timeouts, protocol, ...) before the
// client is created. For a StartTLSServer server it connects over TLS.
func (s *Server) Client(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.Addr()}
	if s.tls != nil {
		o.TLSConfig = s.tls.Clone() // opts may change it; the server's own stays intact
	}
	for _, fn := range opts {
		fn(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// command is the raw-RESP counterpart of Client, over TLS when the server
// needs it.
func (s *Server) command(timeout time.Duration, args ...string) (string, error) {
	return command(s.Addr(), s.tls, timeout, args...)
}

// Pause freezes the server with SIGSTOP: connections stay open but nothing
// is answered, which is how tests simulate a hung or partitioned node.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	Freeze(t, s.running(t).cmd.Process)
}

// Freeze stops p with SIGSTOP and returns once it has stopped (on Linux;
// elsewhere once the signal is sent): a test that acts right after would
// otherwise race with the last moments of the process it means to freeze.
func Freeze(t testing.TB, p *os.Process) {
	t.Helper()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("redistest: stop process %d: %v", p.Pid, err)
	}
	for deadline := time.Now().Add(5 * time.Second); !stopped(p.Pid); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("redistest: process %d did not stop within 5s of SIGSTOP", p.Pid)
		}
	}
}

// Resume undoes Pause with SIGCONT; queued commands are then processed.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGCONT)
}

func (s *Server) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.running(t).cmd.Process.Signal(sig); err != nil {
		t.Fatalf("redistest: %s: send %v: %v", s.Addr(), sig, err)
	}
}

// running returns the server's process, failing the test when it is not
// running. s.mu must be held.
func (s *Server) running(t testing.TB) *process {
	t.Helper()
	if s.proc == nil || s.proc.exited() {
		t.Fatalf("redistest: %s: the server is not running", s.Addr())
	}
	return s.proc
}

// Stop kills the server (even when paused) and waits for it to exit,
// simulating a crash. Calling it on a stopped server does nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
}

func (s *Server) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

func (s *Server) stopLocked() error {
	if s.proc == nil {
		return nil
	}
	if err := s.proc.kill(); err != nil {
		return fmt.Errorf("redistest: %s: %w", s.Addr(), err)
	}
	s.proc = nil
	return nil
}

// Restart stops the server if it is running and starts it again on the same
// port with an empty dataset (nothing was persisted), simulating a node that
// crashed and came back without its data. Cluster nodes keep nodes.conf, so
// they rejoin with their identity and slots. It waits for PING.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(); err != nil {
		t.Fatal(err)
	}
	if err := clearData(s.dir); err != nil {
		t.Fatalf("redistest: %s: clear data dir: %v", s.Addr(), err)
	}
	// The port was just released by the killed process, so a clash means
	// someone else grabbed it; give them a moment, then give up.
	var err error
	for attempt := 0; attempt < startAttempts; attempt++ {
		var p *process
		if p, err = launch(s.port, s.dir, s.head, s.extra, s.tls); err == nil {
			s.proc = p
			return
		}
		if !errors.Is(err, errAddrInUse) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("redistest: restart %s: %v", s.Addr(), err)
}
