package httplimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/redsem/redsem/limiter"
)

// Middleware returns a middleware that runs a handler only once the
// request had its slot of a rate limit and while it holds a permit of a
// semaphore of client (see ServerConfig for which ones, the rate and how
// many permits). Bad arguments give an error wrapping a
// *limiter.ArgumentError (errors.Is(err, limiter.ErrInvalidArgument))
// naming "client" when it is nil, the config's field (Name, Limit, Rate
// or one of its fields, BusyStatus), PauseOnRetryAfter, or the limiter's
// option for a bad LimiterOptions value; a closed client gives
// limiter.ErrClosed, and a Rate on a Redlock client
// limiter.ErrRatesUnsupported. Nothing is sent to Redis until a request
// comes.
//
// With a Rate, a request first reserves its slot (an event of cost 1)
// and sleeps until it, then waits for its permit, so that no permit is
// held by a request that is only sleeping; both come out of the one
// AcquireTimeout. A slot reserved counts, also when the permit is then
// not had (the rate is never exceeded). A slot further off than
// AcquireTimeout allows (or than the request's deadline) is not taken:
// the request is answered BusyStatus with a Retry-After of that wait, as
// below. A permit that comes more than limiter.Lateness after the slot
// is not used with it (limiter.Reservation.Renew takes an event now when
// the rate has room; else the permit is given back and the request
// reserves anew with what is left of AcquireTimeout), so that requests
// whose permits came late do not start together.
//
// A request waits for its permit up to AcquireTimeout (or not at all when
// AcquireTimeout is negative). If none frees in time, it is answered
// BusyStatus (429 by default) with a Retry-After header: the seconds
// until the earliest lease of the semaphore expires, or until the rate
// slot (limiter.BusyError's RetryIn, rounded up, at least 1), and the
// handler does not run. A paused name (limiter.Inspector.Pause, e.g. by
// a Transport that heard 429 upstream) gives no slot and no new permit
// before the pause ends: a request still waiting when AcquireTimeout
// runs out is answered the same, its Retry-After until the pause's end.
// A request whose own context ends while it waits
// (the client went away; a slot it sleeps for is given back where
// limiter.Reservation.Wait can), a Redis failure and a closed client
// are answered 503 Service Unavailable without Retry-After (the latter
// two logged); no slot and no permit is ever granted without Redis
// saying so. A weight the semaphore refuses (see ServerConfig.Weight) is
// answered 500 Internal Server Error and logged; the handler does not
// run.
//
// The handler runs under the lease (limiter.Lease.Run), and
// limiter.LeaseFrom(r.Context()) gives it the lease, e.g. for its
// fencing token (with a Rate and no Limit there is no lease). The lease
// is kept alive while the handler runs. If it is lost, the request's
// context is cancelled with cause limiter.ErrLeaseLost (the limiter logs
// the loss); what the handler wrote stays written. When the handler
// returns or panics, the permits are released, detached from the
// request's context and bounded by the limiter's ReleaseTimeout; a panic
// goes on after the release, to net/http or an outer recovering
// middleware. A failed release is logged and the permits come back at
// the lease's TTL.
//
// Close client only after the http.Server has shut down: its Close ends
// the waits for a slot or a permit in progress (answered 503) and
// releases the leases of
// handlers still running, cancelling their contexts with cause
// limiter.ErrNotHeld.
func Middleware(client *limiter.Client, cfg ServerConfig, opts ...Option) (func(http.Handler) http.Handler, error) {
	c, err := newCommon(client, caps{cfg.Name, cfg.Limit, cfg.Rate, cfg.AcquireTimeout}, opts)
	if err != nil {
		return nil, err
	}
	busy := cfg.BusyStatus
	if busy == 0 {
		busy = http.StatusTooManyRequests
	}
	if busy < 400 || busy > 599 {
		return nil, fmt.Errorf("httplimit: %w", &limiter.ArgumentError{Arg: "BusyStatus", Value: cfg.BusyStatus, Reason: "must be a 4xx or 5xx status"})
	}
	m := &middleware{common: c, key: cfg.Key, weight: cfg.Weight, busy: busy}
	return m.wrap, nil
}

type middleware struct {
	common
	key    func(*http.Request) (string, bool)
	weight func(*http.Request) int64
	busy   int
}

func (m *middleware) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := m.name
		if m.key != nil {
			key, ok := m.key(r)
			if !ok {
				next.ServeHTTP(w, r)
				return
			}
			name += ":" + key
		}
		weight := int64(1)
		if m.weight != nil {
			weight = m.weight(r)
		}
		g, err := m.gates.get(name)
		if err != nil {
			m.unavailable(w, r, name, err)
			return
		}
		lease, err := m.pass(r.Context(), name, g, limiter.Weight(weight))
		if err != nil {
			var busy *limiter.BusyError
			switch {
			case errors.As(err, &busy):
				w.Header().Set("Retry-After", retryAfter(busy.RetryIn))
				http.Error(w, http.StatusText(m.busy), m.busy)
			case errors.Is(err, limiter.ErrInvalidArgument):
				// The weight is outside [1, Limit], or above a fleet-wide
				// limit: no wait would help.
				m.logger.Error("httplimit: weight refused", "semaphore", name,
					"weight", weight, "method", r.Method, "path", r.URL.Path, "err", err)
				http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
			default:
				m.unavailable(w, r, name, err)
			}
			return
		}
		if lease == nil { // a rate alone: nothing to hold
			next.ServeHTTP(w, r)
			return
		}
		m.run(w, r, next, lease, name)
	})
}

// run serves the request under the lease: Lease.Run cancels the context
// on loss and releases when the handler returns or panics (the panic
// goes on after the release).
func (m *middleware) run(w http.ResponseWriter, r *http.Request, next http.Handler, lease *limiter.Lease, name string) {
	err := lease.Run(r.Context(), func(ctx context.Context) error {
		next.ServeHTTP(w, r.WithContext(ctx))
		return nil
	})
	if errors.Is(err, limiter.ErrReleaseFailed) {
		// Not the client's problem: the permits come back at the TTL.
		m.logger.Warn("httplimit: release failed", "semaphore", name, "id", lease.ID(),
			"then", "permits come back at the lease TTL", "err", err)
	}
}

// unavailable answers a request that could not be given a permit for
// another reason than a full semaphore.
func (m *middleware) unavailable(w http.ResponseWriter, r *http.Request, name string, err error) {
	if r.Context().Err() != nil {
		m.logger.Debug("httplimit: request ended", "semaphore", name, "while", "waiting for a permit", "err", err)
	} else {
		m.logger.Warn("httplimit: no permit", "semaphore", name, "err", err)
	}
	http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
}

// retryAfter is d in whole seconds, rounded up, at least 1: Retry-After
// has no finer unit, and 0 would invite an immediate retry storm.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(max(1, int64(math.Ceil(d.Seconds()))), 10)
}
