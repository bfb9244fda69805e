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

// Middleware returns a middleware that runs a handler once the request
// had its rate slot and while it holds its permits (see ServerConfig).
// Bad arguments give an error wrapping a *limiter.ArgumentError naming
// the field or option; a closed client gives limiter.ErrClosed, a Rate on
// a Redlock client limiter.ErrRatesUnsupported.
//
// A request waits up to AcquireTimeout for its slot, then its permit,
// else (also while the name is paused) it is answered BusyStatus with a
// Retry-After of limiter.BusyError's RetryIn, in whole seconds. Its
// context ending while it waits, a Redis failure or a closed client is
// answered 503 (the latter two logged); a weight the semaphore refuses,
// 500 (logged). In these cases the handler does not run.
//
// The handler runs under the lease (limiter.Lease.Run;
// limiter.LeaseFrom(r.Context()); none with a Rate and no Limit). On loss
// its context is cancelled with cause limiter.ErrLeaseLost. When it
// returns or panics the permits are released (a failure is logged; they
// come back at the TTL), then a panic goes on. Close client after the
// http.Server shut down: waits end with 503, and running handlers'
// contexts are cancelled with cause limiter.ErrNotHeld. Why, and the
// details: docs/design.md (httplimit).
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
