package httplimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// Transport is an http.RoundTripper that caps how many requests are in
// flight at once, and how many are sent per unit of time, per key (by
// default per upstream host), across every process that uses the same
// Redis and TransportConfig.Name. A request is in flight from RoundTrip
// until its response body is read to the end (io.EOF), fails, or is
// closed, so a streamed body keeps its permit while it streams. Make it
// with NewTransport (the zero value is not usable); it is safe for
// concurrent use.
type Transport struct {
	common
	key       func(*http.Request) (string, bool)
	base      http.RoundTripper
	inspector *inspect.Inspector
}

// NewTransport returns a Transport that sends requests with cfg.Base once
// they had their slot of a rate limit and hold a permit of a semaphore of
// client. Bad arguments give an error wrapping a *limiter.ArgumentError
// (errors.Is(err, limiter.ErrInvalidArgument)) naming "client" when it is
// nil, the config's field (Name, Limit, Rate or one of its fields, e.g.
// "Rate.Burst"), PauseOnRetryAfter, or the limiter's option for a bad
// LimiterOptions value; a closed client gives limiter.ErrClosed, and a
// Rate on a Redlock client limiter.ErrRatesUnsupported. Nothing is sent
// to Redis until a request is.
//
// Close client only after the Transport's last response body was closed:
// its Close ends the waits in progress (RoundTrip fails with
// limiter.ErrClosed) and releases the permits of responses still being
// read, without cutting their bodies off.
func NewTransport(client *limiter.Client, cfg TransportConfig, opts ...Option) (*Transport, error) {
	c, err := newCommon(client, caps{cfg.Name, cfg.Limit, cfg.Rate, cfg.AcquireTimeout}, opts)
	if err != nil {
		return nil, err
	}
	t := &Transport{common: c, key: cfg.Key, base: cfg.Base, inspector: inspect.New(client)}
	if t.key == nil {
		t.key = hostKey
	}
	if t.base == nil {
		t.base = http.DefaultTransport
	}
	return t, nil
}

// RoundTrip sends req with the base transport once it had its rate slot
// and holds its permit, both within AcquireTimeout; a request its Key
// declines is sent at once, uncapped.
//
// Without slot or permit, RoundTrip sends nothing, holds nothing, closes
// req.Body and returns a wrapped error: the context's cause when the
// request's context ends; a *limiter.BusyError (limiter.ErrBusy; after a
// wait limiter.ErrTimeout; Paused while the key is paused) after
// AcquireTimeout or for a slot further off; limiter.ErrClosed once the
// limiter Client closes; or Redis's error.
//
// The permit is released once: when the base transport fails, or the
// body is read to io.EOF, fails or is closed (no body: before RoundTrip
// returns); a failed release is logged, the permit back at the TTL. A
// body never closed keeps its permit until the Client closes. If the
// lease is lost in flight, RoundTrip or every later Read of the body
// returns an error matching limiter.ErrLeaseLost.
//
// A 429 or 503 with Retry-After pauses the key for every process, at most
// PauseOnRetryAfter's bound, and cuts its rate where it is learned
// (limiter.Adaptive), with or without Retry-After (a failure is logged);
// the response is returned unchanged. Why, and the details: docs/design.md (httplimit).
//
// Any answer's advertised quota (RateLimit-Policy and RateLimit, the IETF
// draft's fields old and new, or X-RateLimit-*: GitHub's) is read: a
// quota per window goes to the fleet when it changes, and every 10s
// while it stands (one call per process; inspect.Inspector.Advertise: a learned rate takes it), and a
// spent one (remaining 0, a reset ahead) pauses the key until the reset,
// as a 429 would, before the 429 (at most PauseOnRetryAfter's bound;
// once per pause per process). A reset in whole seconds pauses up to a
// second past a window's true end: docs/adaptive.md.
//
// With CutOnLatency, the time of every other answer is measured (from
// the request written to the answer's first byte), and a run of slow
// ones cuts the key's learned limit and rate as a 429 does, without a
// pause.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	key, ok := t.key(req)
	if !ok {
		return t.base.RoundTrip(req)
	}
	name := t.name + ":" + key
	g, err := t.gates.get(name)
	var lease *limiter.Lease
	if err == nil {
		lease, err = t.pass(req.Context(), name, g)
	}
	if err != nil {
		if req.Body != nil { // RoundTrip must close it, also on errors
			_ = req.Body.Close()
		}
		return nil, fmt.Errorf("httplimit: %s: %w", name, err)
	}
	if lease == nil { // a rate alone: nothing is held while it is in flight
		traced, w := t.timing(req)
		resp, err := t.base.RoundTrip(traced)
		if err == nil {
			t.answered(req, name, g, resp, w.took())
		}
		return resp, err
	}

	// The request runs with a context cancelled when the lease is lost,
	// so that a body still streaming is cut off (see above).
	ctx, cancel := context.WithCancelCause(req.Context())
	stop := context.AfterFunc(lease.Context(), func() {
		if err := lease.Err(); errors.Is(err, limiter.ErrLeaseLost) {
			cancel(err)
		}
	})
	h := &held{t: t, name: name, lease: lease, stop: stop, cancel: cancel}
	traced, w := t.timing(req.WithContext(ctx))
	resp, err := t.base.RoundTrip(traced)
	if err != nil {
		h.finish()
		if lerr := h.lost(); lerr != nil {
			return nil, fmt.Errorf("%w: %w", lerr, err)
		}
		return nil, err
	}
	t.answered(req, name, g, resp, w.took())
	if resp.Body == nil || resp.Body == http.NoBody {
		h.finish()
		return resp, nil
	}
	b := &body{rc: resp.Body, h: h}
	if w, ok := resp.Body.(io.Writer); ok {
		// A 101 Switching Protocols body is the connection itself: keep
		// it writable, and the permit until it is closed.
		resp.Body = &rwBody{body: b, w: w}
	} else {
		resp.Body = b
	}
	return resp, nil
}

// CloseIdleConnections closes the idle connections of the base transport
// if it has that method (http.Client.CloseIdleConnections calls it).
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// hostKey is the default Key: the URL's host and port, lower-cased, with
// the scheme's default port, so "https://API.example.com" and
// "https://api.example.com:443" share their cap.
func hostKey(r *http.Request) (string, bool) {
	if r.URL == nil {
		return "", false // the base transport rejects it
	}
	host, port := strings.ToLower(r.URL.Hostname()), r.URL.Port()
	if port == "" {
		switch strings.ToLower(r.URL.Scheme) {
		case "https", "wss":
			port = "443"
		case "http", "ws":
			port = "80"
		default:
			return host, true
		}
	}
	return net.JoinHostPort(host, port), true
}

// held is the permit of one request in flight.
//
// Work under a lease otherwise runs through limiter.Lease.Run, whose fn
// is the whole of the work: Run releases when fn returns. Here the work
// ends after RoundTrip has returned, when the caller is done with the
// body, in a Read or Close of the caller's, so there is no fn to hand to
// Run. finish does what the end of Run does instead: nothing for a lease
// that already ended (lost, or released by the Client's Close), else
// Lease.Release, which is detached from the request's context and
// bounded by the limiter's ReleaseTimeout (a cancelled request still
// gives its permit back, and an unreachable Redis costs the caller at
// most that long). The loss is watched with an AfterFunc on the lease's
// context, as Run does.
type held struct {
	t      *Transport
	name   string
	lease  *limiter.Lease
	stop   func() bool // stops the loss watch
	cancel context.CancelCauseFunc
	once   sync.Once
}

// finish ends the request's hold, once: Close after io.EOF, or a Read
// racing a Close, release nothing more.
func (h *held) finish() {
	h.once.Do(func() {
		h.stop()
		h.cancel(nil) // the response is over: nothing more to cut off
		if h.lease.Err() != nil {
			// Lost (gone from Redis, or lapsing there at its TTL), or
			// released by the limiter Client's Close: nothing to give
			// back.
			return
		}
		// The lease's Context carries the request's values; Release
		// detaches from its cancellation.
		if err := h.lease.Release(h.lease.Context()); err != nil && !errors.Is(err, limiter.ErrNotHeld) {
			h.t.logger.Warn("httplimit: release failed", "semaphore", h.name, "id", h.lease.ID(),
				"then", "permit comes back at the lease TTL", "err", err)
		}
	})
}

// lost returns an error matching limiter.ErrLeaseLost once the lease was
// lost, else nil.
func (h *held) lost() error {
	if err := h.lease.Err(); errors.Is(err, limiter.ErrLeaseLost) {
		return fmt.Errorf("httplimit: %s: %w", h.name, err)
	}
	return nil
}

// body is a response body that holds its request's permit until it is
// read to the end, fails or is closed.
type body struct {
	rc io.ReadCloser
	h  *held
}

// Read reads the response body; the Read that returns io.EOF, or any
// other error, releases the permit first. After a loss of the lease,
// Read returns an error matching limiter.ErrLeaseLost.
func (b *body) Read(p []byte) (int, error) {
	if err := b.h.lost(); err != nil {
		return 0, err
	}
	n, err := b.rc.Read(p)
	if err != nil {
		if lerr := b.h.lost(); lerr != nil {
			err = lerr // the read was cut off by the loss
		}
		b.h.finish()
	}
	return n, err
}

// Close closes the response body, then releases the permit unless that
// happened already. It returns the body's Close error.
func (b *body) Close() error {
	err := b.rc.Close()
	b.h.finish()
	return err
}

// rwBody is the body of a 101 Switching Protocols response.
type rwBody struct {
	*body
	w io.Writer
}

func (b *rwBody) Write(p []byte) (int, error) { return b.w.Write(p) }
