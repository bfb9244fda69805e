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
	inspector *limiter.Inspector
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
	t := &Transport{common: c, key: cfg.Key, base: cfg.Base, inspector: client.Inspector()}
	if t.key == nil {
		t.key = hostKey
	}
	if t.base == nil {
		t.base = http.DefaultTransport
	}
	return t, nil
}

// RoundTrip waits for the request's rate slot, then for a permit of its
// semaphore, then sends the request with the base transport. A request
// its Key declines is sent at once, uncapped.
//
// The slot comes first so that no permit is held while a request sleeps
// until its slot: the permits go to requests that can be sent. Its event
// counts from then on, also when the permit is then not had (the rate is
// never exceeded; the slot goes unused). Both waits come out of the one
// AcquireTimeout. A slot further off than what is left of it (or past the
// request's deadline) is not taken: RoundTrip fails at once with an error
// wrapping the rate's *limiter.BusyError (Rate set; Paused when the key
// is paused; RetryIn how long the wait would have been). A permit that
// comes more than limiter.Lateness after the slot is not used with it
// (the request would bunch with those reserved after it): the request
// takes an event now when the rate has room (limiter.Reservation.Renew),
// else gives the permit back and reserves anew with what is left of
// AcquireTimeout, failing as above when that slot is further off.
//
// The wait ends with the request's context (RoundTrip returns an error
// wrapping its cause; a slot being slept for is given back where
// limiter.Reservation.Wait can), after AcquireTimeout (an error
// wrapping a *limiter.BusyError, which matches limiter.ErrBusy and, after
// a wait, limiter.ErrTimeout), or when the limiter Client closes
// (limiter.ErrClosed, also during a rate sleep); a Redis failure is returned wrapped, whether reserving the slot
// or acquiring the permit (a failed reservation may have been counted).
// In each case nothing is held, the request's body is closed and nothing
// is sent: a Transport never sends a request Redis did not let through.
//
// A response 429 Too Many Requests or 503 Service Unavailable with a
// Retry-After header (seconds, or an HTTP date) pauses the key for every
// process (limiter.Inspector.Pause) for as long as it asks, at most
// PauseOnRetryAfter's bound (5 minutes by default), with a Rate, a Limit
// or both: later requests get slots after the pause, paced by the rate
// from there, and a request whose slot would come after AcquireTimeout
// fails at once as above. Requests whose slots were reserved before the
// 429, in this process or another, and have not come yet are held too:
// the pause moves their slots past its end, in the order they were
// reserved and ahead of later ones (limiter.Reservation), a few ms after
// the 429; one moved past AcquireTimeout fails with the rate's
// *limiter.BusyError, Paused set. The semaphore grants no new permit before the
// end (waiters are served in order from then), so a request still
// waiting when AcquireTimeout runs out fails with the semaphore's
// *limiter.BusyError, Paused set and RetryIn until the end (at once when
// AcquireTimeout is negative). A pause already longer stays. No Retry-After, a malformed one or
// one already past pauses nothing. The Pause call (one round trip before
// RoundTrip returns) is detached from the request's cancellation and
// bounded by 2s; a Redis failure there is logged. The response is
// returned to the caller unchanged in every case.
//
// The permit is released once: when the base transport fails, or when
// the response body is read to io.EOF, fails, or is closed, whichever
// comes first; a response without a body (http.NoBody: HEAD, 204, 304,
// Content-Length 0) releases it before RoundTrip returns. The release
// takes a round trip to Redis, bounded by the limiter's ReleaseTimeout,
// in the Read that returns io.EOF or in Close. A failed release is logged
// and the permit comes back at the lease's TTL. A body that is never
// read to the end nor closed keeps its permit, kept alive, until the
// limiter Client closes (as it keeps its connection): close every body,
// or cap the hold with LimiterOptions(limiter.MaxHold(d)).
//
// If the lease is lost while the request is in flight (no refresh
// confirmed by Redis in time, or the lease removed from Redis), the
// request is cancelled: RoundTrip, or every later Read of the body,
// returns an error matching limiter.ErrLeaseLost. That is deliberate:
// once the lease is lost another process may be given the permit, so
// carrying on would exceed the cap that this Transport promises the
// upstream, and cutting the request off (which closes its connection)
// is what ends the load on the upstream. The bytes read before the loss
// were delivered intact; a caller reads the error like any other
// failure mid-body, e.g. a reset connection.
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
		resp, err := t.base.RoundTrip(req)
		if err == nil {
			t.pauseOn(req, name, resp)
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
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		h.finish()
		if lerr := h.lost(); lerr != nil {
			return nil, fmt.Errorf("%w: %w", lerr, err)
		}
		return nil, err
	}
	t.pauseOn(req, name, resp)
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
