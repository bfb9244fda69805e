package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redsem/redsem/httplimit"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

func transport(t *testing.T, lc *limiter.Client, cfg httplimit.TransportConfig, opts ...httplimit.Option) *httplimit.Transport {
	t.Helper()
	if cfg.Base == nil {
		cfg.Base = newBase(t)
	}
	rt, err := httplimit.NewTransport(lc, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func upstream(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// hostName is the semaphore of the transport named name for a test
// server: the default Key is the URL's host and port.
func hostName(name string, s *httptest.Server) string {
	return name + ":" + strings.TrimPrefix(s.URL, "http://")
}

// The upstream counts the requests it serves at once. Its handler
// streams the body in two parts, so a transport that let go of the
// permit when RoundTrip returned (after the headers) would let more
// requests in while bodies still stream.
func TestTransportCapHolds(t *testing.T) {
	e := newEnv(t)
	var c redistest.Gauge
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		c.Enter()
		defer c.Leave()
		io.WriteString(w, "head ")
		w.(http.Flusher).Flush()
		time.Sleep(15 * time.Millisecond)
		io.WriteString(w, "tail")
	})
	hc := httpClient(t, transport(t, e.lc, httplimit.TransportConfig{Name: "out", Limit: 3, AcquireTimeout: 10 * time.Second}))
	var wg sync.WaitGroup
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := hc.Get(up.URL)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "head tail" {
				t.Errorf("body %q, %v", b, err)
			}
		}()
	}
	wg.Wait()
	if p := c.Peak(); p > 3 || p < 2 {
		t.Fatalf("peak of %d requests at once at the upstream with a limit of 3 (2 or 3 expected)", p)
	}
	if hs := holders(t, e.other(t), hostName("out", up)); len(hs) != 0 {
		t.Fatalf("permits still held after every body was read: %v", hs)
	}
}

// A streamed body holds its permit after RoundTrip returned, until it is
// read to the end; that Read releases it, and Close after it releases
// nothing more.
func TestTransportStreamingBodyKeepsPermit(t *testing.T) {
	noLeaks(t)
	e := newEnv(t)
	more := make(chan struct{})
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		select {
		case <-more:
		case <-r.Context().Done(): // the test failed
			return
		}
		io.WriteString(w, "last\n")
	})
	hc := httpClient(t, transport(t, e.lc, httplimit.TransportConfig{Name: "stream", Limit: 1, AcquireTimeout: -1}))
	observer, name := e.other(t), hostName("stream", up)

	resp, err := hc.Get(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if hs := holders(t, observer, name); len(hs) != 1 {
		t.Fatalf("holders after RoundTrip returned: %v, want the streaming response's", hs)
	}
	first := make([]byte, len("first\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first\n" {
		t.Fatalf("first part %q, %v", first, err)
	}
	err = getErr(hc, up.URL)
	var busy *limiter.BusyError
	if !errors.As(err, &busy) || !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("a second request while the body streams: %v, want a *limiter.BusyError", err)
	}

	close(more)
	e.srv.ResetStats(t)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "last\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}
	if n := redistest.Scripts(e.srv.CommandCalls(t)); n != 1 {
		t.Fatalf("%d script calls while reading to EOF, want 1 (the release)", n)
	}
	if hs := holders(t, observer, name); len(hs) != 0 {
		t.Fatalf("holders after the body was read to EOF: %v", hs)
	}
	e.srv.ResetStats(t)
	if err := resp.Body.Close(); err != nil {
		t.Fatal(err)
	}
	if n := redistest.Scripts(e.srv.CommandCalls(t)); n != 0 {
		t.Fatalf("Close after EOF made %d script calls: released twice", n)
	}

	// Closing without reading releases too.
	resp, err = hc.Get(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	if hs := holders(t, observer, name); len(hs) != 1 {
		t.Fatalf("holders %v, want 1", hs)
	}
	resp.Body.Close()
	if hs := holders(t, observer, name); len(hs) != 0 {
		t.Fatalf("holders after Close: %v", hs)
	}
}

// closeCounter is a request body that counts its Close calls.
type closeCounter struct {
	io.Reader
	closed atomic.Int32
}

func (c *closeCounter) Close() error { c.closed.Add(1); return nil }

// A request cancelled while it waits, before its headers came, or while
// its body streams holds no permit afterwards, and leaves nothing behind.
func TestTransportCancelledRequestLeavesNoPermit(t *testing.T) {
	noLeaks(t)
	e := newEnv(t)
	var hits atomic.Int32
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/slow-headers" {
			<-r.Context().Done()
			return
		}
		io.WriteString(w, "chunk")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	hc := httpClient(t, transport(t, e.lc, httplimit.TransportConfig{Name: "cancel", Limit: 1, AcquireTimeout: 5 * time.Second}))
	other, name := e.other(t), hostName("cancel", up)
	observer := sem(t, other, name, 1)
	noneHeld := func(when string) {
		t.Helper()
		if hs := holders(t, other, name); len(hs) != 0 {
			t.Fatalf("%s: permits held: %v", when, hs)
		}
	}

	// While waiting: another process holds the permit.
	lease, err := observer.Acquire(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	body := &closeCounter{Reader: strings.NewReader("payload")}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, up.URL, body)
	_, err = hc.Do(req)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request whose context ended while it waited: %v", err)
	}
	if body.closed.Load() == 0 {
		t.Fatal("the request body of a request that never got a permit was not closed")
	}
	if hits.Load() != 0 {
		t.Fatal("a request that never got a permit reached the upstream")
	}
	if err := lease.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	noneHeld("after a cancelled wait")

	// Before the response headers: the base transport's error releases.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, up.URL+"/slow-headers", nil)
	if _, err := hc.Do(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before the headers: %v", err)
	}
	noneHeld("after a cancel before the headers")

	// While the body streams: the failing Read releases, before Close.
	ctx, cancel = context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, up.URL+"/stream", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, chunk); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, context.Canceled) {
		t.Fatalf("reading a cancelled body: %v", err)
	}
	noneHeld("after a cancel while the body streamed")
	resp.Body.Close()

	// Nobody is left waiting in the queue either: a request that does not
	// wait finds the permit free.
	next, err := observer.TryAcquire(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire after every request was cancelled: %v", err)
	}
	next.Release(ctxT(t, 5*time.Second))
}

// A lease lost while the body streams cuts the request off: a Read
// blocked waiting for data fails with ErrLeaseLost, the upstream sees the
// request end, and data already buffered is not handed out after the
// loss either.
func TestTransportLostLeaseFailsBody(t *testing.T) {
	e := newEnv(t)
	upstreamDone := make(chan struct{}, 2)
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "chunk")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			upstreamDone <- struct{}{}
		case <-time.After(10 * time.Second):
		}
	})
	hc := httpClient(t, transport(t, e.lc, httplimit.TransportConfig{Name: "lost", Limit: 1},
		httplimit.LimiterOptions(limiter.TTL(600*time.Millisecond))))
	observer, name := e.other(t), hostName("lost", up)
	waitUpstream := func() {
		t.Helper()
		select {
		case <-upstreamDone:
		case <-time.After(5 * time.Second):
			t.Fatal("the upstream never saw the request end")
		}
	}

	// A reader blocked in Read.
	resp, err := hc.Get(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	chunk := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, chunk); err != nil {
		t.Fatal(err)
	}
	evict(t, observer, name)
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(resp.Body) // blocks until the loss cuts it off
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, limiter.ErrLeaseLost) {
			t.Fatalf("reading after the loss: %v, want ErrLeaseLost", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the body kept streaming after its lease was lost")
	}
	if _, err := resp.Body.Read(chunk); !errors.Is(err, limiter.ErrLeaseLost) {
		t.Fatalf("a later Read: %v, want ErrLeaseLost", err)
	}
	waitUpstream()

	// A reader that has data buffered when the loss comes.
	resp2, err := hc.Get(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	if _, err := io.ReadFull(resp2.Body, chunk[:2]); err != nil {
		t.Fatal(err)
	}
	evict(t, observer, name)
	waitUpstream() // the loss was noticed and the request cut off
	if n, err := resp2.Body.Read(chunk); !errors.Is(err, limiter.ErrLeaseLost) {
		t.Fatalf("Read after the loss: %q, %v; want ErrLeaseLost", chunk[:n], err)
	}
	if hs := holders(t, observer, name); len(hs) != 0 {
		t.Fatalf("holders after both leases were lost: %v", hs)
	}

	// A base transport that reports the cut-off as an error of its own.
	rt := transport(t, e.lc, httplimit.TransportConfig{Name: "lost", Limit: 1,
		Key: func(*http.Request) (string, bool) { return "own", true },
		Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusOK, Body: blockingBody{r.Context()}, Request: r}, nil
		}),
	}, httplimit.LimiterOptions(limiter.TTL(600*time.Millisecond)))
	resp3, err := rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://upstream.test/", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer resp3.Body.Close()
	evict(t, observer, "lost:own")
	if _, err := resp3.Body.Read(chunk); !errors.Is(err, limiter.ErrLeaseLost) {
		t.Fatalf("Read cut off by the loss: %v, want ErrLeaseLost", err)
	}
}

// blockingBody blocks in Read until ctx ends, then fails with an error
// that says nothing of why.
type blockingBody struct{ ctx context.Context }

func (b blockingBody) Read([]byte) (int, error) {
	<-b.ctx.Done()
	return 0, io.ErrUnexpectedEOF
}

func (b blockingBody) Close() error { return nil }

// getErr is the error of a GET that should fail; a response that came
// anyway is closed, so its handler does not hold up the server's Close.
func getErr(hc *http.Client, url string) error {
	resp, err := hc.Get(url)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A failing base transport releases the permit; a response without a
// body releases it before RoundTrip returns; a request the Key declines
// needs no permit.
func TestTransportReleasesOnErrorAndEmptyBody(t *testing.T) {
	e := newEnv(t)
	refused := errors.New("refused")
	rt := transport(t, e.lc, httplimit.TransportConfig{
		Name: "misc", Limit: 1, AcquireTimeout: -1,
		Key: func(r *http.Request) (string, bool) { return "k", r.Header.Get("X-Uncapped") == "" },
		Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			switch r.URL.Path {
			case "/fail":
				return nil, refused
			case "/empty":
				return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: r}, nil
			}
			return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("x")), Request: r}, nil
		}),
	})
	observer, name := e.other(t), "misc:k"
	req := func(path string, header ...string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "http://upstream.test"+path, nil)
		r = r.WithContext(ctxT(t, 5*time.Second))
		if len(header) == 2 {
			r.Header.Set(header[0], header[1])
		}
		return r
	}
	if _, err := rt.RoundTrip(req("/fail")); err != refused {
		t.Fatalf("the base transport's error: %v, want it unchanged", err)
	}
	if hs := holders(t, observer, name); len(hs) != 0 {
		t.Fatalf("permits held after the base transport failed: %v", hs)
	}
	if _, err := rt.RoundTrip(req("/empty")); err != nil {
		t.Fatal(err)
	}
	if hs := holders(t, observer, name); len(hs) != 0 {
		t.Fatalf("permits held after a response without a body: %v", hs)
	}

	// Hold the permit with an unread body: capped requests are refused,
	// uncapped ones pass.
	resp, err := rt.RoundTrip(req("/body"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.RoundTrip(req("/body")); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("capped request while the permit is held: %v", err)
	}
	uncapped, err := rt.RoundTrip(req("/body", "X-Uncapped", "1"))
	if err != nil {
		t.Fatalf("a request the Key declines: %v", err)
	}
	uncapped.Body.Close()
	resp.Body.Close()
}

// By default every upstream host:port has its own cap.
func TestTransportPerHost(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	slow := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done(): // the test failed
		}
	})
	fast := upstream(t, func(w http.ResponseWriter, r *http.Request) {})
	hc := httpClient(t, transport(t, e.lc, httplimit.TransportConfig{Name: "hosts", Limit: 1, AcquireTimeout: -1}))
	resp, err := hc.Get(slow.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := getErr(hc, slow.URL); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("second request to the busy host: %v", err)
	}
	other, err := hc.Get(fast.URL)
	if err != nil {
		t.Fatalf("a request to another host: %v", err)
	}
	other.Body.Close()
	close(release)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// A 101 Switching Protocols body stays writable and holds the permit
// until it is closed.
func TestTransportUpgradedConnection(t *testing.T) {
	e := newEnv(t)
	up := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		buf := make([]byte, 2)
		if _, err := io.ReadFull(brw, buf); err == nil {
			conn.Write(buf) // echo once, then wait for the client to close
			io.Copy(io.Discard, brw)
		}
	})
	hc := httpClient(t, transport(t, e.lc, httplimit.TransportConfig{Name: "upgrade", Limit: 1}))
	req, _ := http.NewRequestWithContext(ctxT(t, 10*time.Second), http.MethodGet, up.URL, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rw, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != http.StatusSwitchingProtocols || !ok {
		t.Fatalf("status %d, writable body: %v", resp.StatusCode, ok)
	}
	if _, err := rw.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	echo := make([]byte, 2)
	if _, err := io.ReadFull(rw, echo); err != nil || string(echo) != "hi" {
		t.Fatalf("echo %q, %v", echo, err)
	}
	observer, name := e.other(t), hostName("upgrade", up)
	if hs := holders(t, observer, name); len(hs) != 1 {
		t.Fatalf("holders while the upgraded connection is open: %v", hs)
	}
	rw.Close()
	if hs := holders(t, observer, name); len(hs) != 0 {
		t.Fatalf("holders after it was closed: %v", hs)
	}
}
