package httplimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/redsem/redsem/limiter"
)

// defaultAcquireTimeout is the configs' AcquireTimeout when they do not
// say.
const defaultAcquireTimeout = 5 * time.Second

// ServerConfig says what Middleware caps: the semaphore of a request, its
// limit and weight, how long a request waits and how a busy one is
// answered. Options say the rest.
type ServerConfig struct {
	// Name names the semaphore (required). With Key, every key has its
	// own semaphore, named Name+":"+key.
	Name string
	// Limit is the number of permits of each semaphore (required, >= 1):
	// across every process that uses the same Redis and Name, at most
	// Limit permits are held at once.
	Limit int64
	// Key, when set, picks the semaphore of a request: one cap of Limit
	// per key, e.g. per API key or per tenant. A request for which it
	// returns ok == false is not gated. Without Key, every request shares
	// the one semaphore Name. Keys should come from authenticated values
	// (see the package doc).
	Key func(r *http.Request) (key string, ok bool)
	// Weight, when set, gives the permits a request takes (default 1).
	// A weight the semaphore refuses is a misconfiguration: outside
	// [1, Limit] (refused before anything is sent to Redis), or above a
	// fleet-wide limit stored with limiter.Inspector.SetLimit. The
	// request is answered 500 Internal Server Error and the limiter's
	// *ArgumentError is logged.
	Weight func(r *http.Request) int64
	// AcquireTimeout bounds how long a request waits for a permit (woken
	// by a release, not by polling), and the request's own context bounds
	// it too: it is the semaphores' limiter.AcquireTimeout. 0 means the
	// default, 5s (not the limiter's unbounded wait); a negative
	// AcquireTimeout does not wait at all: a request that finds the
	// semaphore full is answered at once.
	AcquireTimeout time.Duration
	// BusyStatus is the status of the answer to a request that got no
	// permit within AcquireTimeout (default 429 Too Many Requests;
	// 503 Service Unavailable is the other usual choice). It must be
	// a 4xx or 5xx status.
	BusyStatus int
}

// TransportConfig says what a Transport caps: the semaphore of a request,
// its limit, how long a request waits, and what sends the requests.
// Options say the rest.
type TransportConfig struct {
	// Name prefixes the semaphores (required): a request's semaphore is
	// named Name+":"+key.
	Name string
	// Limit is the number of requests per key in flight at once across
	// every process that uses the same Redis and Name (required, >= 1).
	Limit int64
	// Key picks a request's semaphore; a request for which it returns
	// ok == false is sent without a permit. Default: the request's host
	// and port (lower-cased, with the scheme's default port filled in),
	// so every upstream host has its own cap of Limit.
	Key func(r *http.Request) (key string, ok bool)
	// AcquireTimeout bounds how long a request waits for a permit, and
	// the request's context bounds it too: it is the semaphores'
	// limiter.AcquireTimeout. 0 means the default, 5s (not the limiter's
	// unbounded wait); a negative AcquireTimeout does not wait at all:
	// RoundTrip fails at once when the semaphore is full.
	AcquireTimeout time.Duration
	// Base sends the requests (default http.DefaultTransport).
	Base http.RoundTripper
}

// Option configures Middleware or NewTransport, as asynqmw's and
// scheduler's options configure theirs.
type Option func(*options)

type options struct {
	limiterOpts []limiter.Option
	logger      *slog.Logger
}

// LimiterOptions passes options to every semaphore (e.g. limiter.TTL,
// limiter.MaxHold, limiter.ReleaseTimeout, limiter.Metrics); they
// override the options the limiter.Client was made with. limiter.Prefix
// is a Client option: give it to limiter.New (here it is an
// *ArgumentError). The config's AcquireTimeout overrides theirs. A bad
// option makes Middleware or NewTransport return the limiter's
// *ArgumentError.
func LimiterOptions(opts ...limiter.Option) Option {
	return func(o *options) { o.limiterOpts = append(o.limiterOpts, opts...) }
}

// Logger sets where failed releases, Redis failures and refused weights
// are logged (default slog.Default()). Lost leases are logged by the
// limiter (limiter.Logger).
func Logger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// common is what the middleware and the transport share: validated
// fields, the semaphore options and the semaphore cache.
type common struct {
	name           string
	acquireTimeout time.Duration // < 0: TryAcquire
	logger         *slog.Logger
	sems           *semaphores
}

// configFields are the config's fields that Client.Semaphore validates,
// by the names of its arguments.
var configFields = map[string]string{"name": "Name", "limit": "Limit"}

// newCommon validates what both configs have and makes the semaphore
// cache. A probe semaphore (Client.Semaphore sends nothing to Redis)
// reports a bad name, limit or limiter option, or a closed client, now
// rather than on the first request; a bad Name or Limit as a
// *limiter.ArgumentError naming the config's field.
func newCommon(client *limiter.Client, name string, limit int64, acquireTimeout time.Duration, opts []Option) (common, error) {
	if client == nil {
		return common{}, fmt.Errorf("httplimit: %w", &limiter.ArgumentError{Arg: "client", Value: nil, Reason: "must not be nil"})
	}
	var o options
	for _, fn := range opts {
		if fn != nil {
			fn(&o)
		}
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if acquireTimeout == 0 {
		acquireTimeout = defaultAcquireTimeout
	}
	// AcquireTimeout alone (with the request's context) bounds the wait.
	semOpts := append(slices.Clone(o.limiterOpts), limiter.AcquireTimeout(max(acquireTimeout, 0)))
	if _, err := client.Semaphore(name, limit, semOpts...); err != nil {
		var ae *limiter.ArgumentError
		if errors.As(err, &ae) {
			if field, ok := configFields[ae.Arg]; ok {
				err = &limiter.ArgumentError{Arg: field, Value: ae.Value, Reason: ae.Reason}
			}
		}
		return common{}, fmt.Errorf("httplimit: %w", err)
	}
	return common{name: name, acquireTimeout: acquireTimeout, logger: o.logger, sems: newSemaphores(client, limit, semOpts)}, nil
}
