package redistest

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy in front of a server, for network-fault tests: a
// partition (Blackhole, Heal) and dropped connections (Reset), which
// Server.Pause cannot show because a paused server also stops working.
// Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup // the accept loop and every link's goroutines
	stop   chan struct{}  // closed at cleanup

	mu    sync.Mutex
	links map[*link]struct{}
	// open is closed while bytes flow; Blackhole replaces it with a new,
	// open channel that Heal closes, so forwarders wait on it.
	open chan struct{}
}

// link is one client connection and, once dialled, its connection to the
// target.
type link struct {
	client   net.Conn
	mu       sync.Mutex
	upstream net.Conn      // nil until dialled
	done     chan struct{} // closed by shut
	once     sync.Once
}

// StartProxy listens on a free loopback port and forwards every connection
// to target. It is stopped at cleanup, its connections closed and its
// goroutines gone.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy listen: %v", err)
	}
	p := &Proxy{target: target, ln: ln, stop: make(chan struct{}), links: map[*link]struct{}{}, open: closedChan()}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Addr returns the proxy's "127.0.0.1:port", to connect to instead of the
// target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Blackhole stops forwarding, in both directions, like a network
// partition: connections stay open and new ones are accepted, but no byte
// sent after Blackhole returned reaches the other side (one sent before
// may still arrive), and a connection accepted meanwhile reaches the
// target only after Heal. A close is held back too: the far side does
// not learn that its peer went away, as across a real partition.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already blackholed
	}
}

// Heal forwards again. What was held back is delivered, in order, not
// dropped, as TCP does when a partition heals before a side gives up: a
// RESP stream never loses bytes in its middle, which no real network
// would do either. A side that gave up meanwhile (closed its connection)
// gets its link closed.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// Reset closes every current connection abruptly on both sides (linger 0:
// the peers get a TCP RST, as from a crashed middlebox, not an orderly
// close) and forwards normally for new ones: it also ends a Blackhole.
// Bytes held back on the closed connections are dropped with them.
func (p *Proxy) Reset() {
	p.mu.Lock()
	links := p.links
	if links == nil { // stopped
		p.mu.Unlock()
		return
	}
	p.links = map[*link]struct{}{}
	p.mu.Unlock()
	// Shut before the gate opens: a copy held at the gate would otherwise
	// pass its bytes on before its link closed.
	for l := range links {
		l.shut(true)
	}
	p.Heal()
}

// close stops accepting, closes every connection and waits for every
// goroutine.
func (p *Proxy) close() {
	close(p.stop)
	_ = p.ln.Close()
	p.mu.Lock()
	links := p.links
	p.links = nil
	p.mu.Unlock()
	for l := range links {
		l.shut(false)
	}
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // a transient error (e.g. too many open files)
			continue
		}
		l := &link{client: c, done: make(chan struct{})}
		p.mu.Lock()
		if p.links == nil { // closing
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(l)
	}
}

// serve dials the target once bytes may flow (nothing reaches the target
// across a partition, not even a connection) and forwards both ways.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer p.forget(l)
	defer l.shut(false) // whichever way it ends; a no-op after Reset's
	if !p.pass(l) {
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return // the client is closed, as if the target refused it
	}
	l.mu.Lock()
	select {
	case <-l.done: // Reset or cleanup while dialling
		l.mu.Unlock()
		_ = up.Close()
		return
	default:
	}
	l.upstream = up
	l.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer l.shut(false)
		p.copy(up, l.client, l)
	}()
	p.copy(l.client, up, l)
}

// copy forwards src to dst until either fails, waiting at each chunk
// while blackholed. The wait comes after the read, so a byte read after
// Blackhole returned is held. An end of src is passed on (by the caller
// closing the link) only once the gate opens, so a partition hides it.
func (p *Proxy) copy(dst, src net.Conn, l *link) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !p.pass(l) {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pass waits until bytes may flow, and reports false when the link or
// the proxy ended first.
func (p *Proxy) pass(l *link) bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		// A link shut as the gate opened (Reset) passes nothing: select
		// would pick either.
		select {
		case <-l.done:
			return false
		default:
			return true
		}
	case <-l.done:
	case <-p.stop:
	}
	return false
}

func (p *Proxy) forget(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// shut closes both connections once; with abort, with a RST.
func (l *link) shut(abort bool) {
	l.once.Do(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		close(l.done)
		for _, c := range []net.Conn{l.client, l.upstream} {
			if c == nil {
				continue
			}
			if tc, ok := c.(*net.TCPConn); ok && abort {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
		}
	})
}
