package httplimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/redsem/redsem/limiter"
)

// defaultAcquireTimeout is the configs' AcquireTimeout when they do not
// say.
const defaultAcquireTimeout = 5 * time.Second

// ServerConfig says what Middleware caps: the semaphore and rate limit
// of a request, its limit, rate and weight, how long a request waits and
// how a busy one is answered. Options say the rest.
type ServerConfig struct {
	// Name names the semaphore and the rate limit (required). With Key,
	// every key has its own, named Name+":"+key.
	Name string
	// Limit is the number of permits of each semaphore: across every
	// process that uses the same Redis and Name, at most Limit permits
	// are held at once. 0 (only with a Rate) caps no concurrency.
	Limit int64
	// Rate, when set, is the rate of each name too (a limiter.RateLimit,
	// fleet-wide like the semaphore): a request is an event of cost 1,
	// whatever its Weight. With Limit, both hold: a request takes its
	// rate slot first, then its permit (see Middleware). Limit or Rate is
	// required.
	Rate limiter.Rate
	// Key, when set, picks the semaphore of a request: one cap of Limit
	// per key, e.g. per API key or per tenant. A request for which it
	// returns ok == false is not gated. Without Key, every request shares
	// the one semaphore Name. Keys should come from authenticated values
	// (see the package doc).
	Key func(r *http.Request) (key string, ok bool)
	// Weight, when set, gives the permits a request takes (default 1).
	// A weight the semaphore refuses is a misconfiguration: outside
	// [1, Limit] (refused before anything is sent to Redis), or above a
	// fleet-wide limit stored with inspect.Inspector.SetLimit. The
	// request is answered 500 Internal Server Error and the limiter's
	// *ArgumentError is logged.
	Weight func(r *http.Request) int64
	// AcquireTimeout bounds how long a request waits for its rate slot
	// and its permit together (woken by a release, not by polling), and
	// the request's own context bounds it too: it is the semaphores' and
	// rate limits' limiter.AcquireTimeout. 0 means the default, 5s (not
	// the limiter's unbounded wait); a negative AcquireTimeout does not
	// wait at all: a request that finds the semaphore full, or whose slot
	// is not now, is answered at once.
	AcquireTimeout time.Duration
	// BusyStatus is the status of the answer to a request that got no
	// rate slot or permit within AcquireTimeout (default 429 Too Many Requests;
	// 503 Service Unavailable is the other usual choice). It must be
	// a 4xx or 5xx status.
	BusyStatus int
}

// TransportConfig says what a Transport caps: the semaphore and rate
// limit of a request, its limit and rate, how long a request waits, and
// what sends the requests. Options say the rest.
type TransportConfig struct {
	// Name prefixes the semaphores and rate limits (required): a
	// request's are named Name+":"+key.
	Name string
	// Limit is the number of requests per key in flight at once across
	// every process that uses the same Redis and Name. 0 (only with a
	// Rate) caps no concurrency.
	Limit int64
	// Rate, when set, is the rate of requests per key across every
	// process (a limiter.RateLimit): "100 per minute, burst 10" is
	// limiter.Rate{Events: 100, Per: time.Minute, Burst: 10}. With Limit,
	// both hold: a request takes its rate slot first, then its permit
	// (see RoundTrip). Limit or Rate is required. Either way, a
	// Transport pauses the key when the upstream says so
	// (PauseOnRetryAfter).
	Rate limiter.Rate
	// Key picks a request's semaphore and rate limit; a request for which
	// it returns ok == false is sent at once, uncapped. Default: the
	// request's host and port (lower-cased, with the scheme's default
	// port filled in), so every upstream host has its own caps.
	Key func(r *http.Request) (key string, ok bool)
	// AcquireTimeout bounds how long a request waits for its rate slot
	// and its permit together, and the request's context bounds it too:
	// it is the semaphores' and rate limits' limiter.AcquireTimeout. 0
	// means the default, 5s (not the limiter's unbounded wait); a
	// negative AcquireTimeout does not wait at all: RoundTrip fails at
	// once when the semaphore is full or the slot is not now.
	AcquireTimeout time.Duration
	// Base sends the requests (default http.DefaultTransport).
	Base http.RoundTripper
}

// Option configures Middleware or NewTransport, as asynqmw's and
// scheduler's options configure theirs.
type Option func(*options)

type options struct {
	limiterOpts []limiter.NameOption
	semOpts     []limiter.NameOption // after limiterOpts, semaphores only
	rateOpts    []limiter.NameOption // after limiterOpts, rate limits only
	logger      *slog.Logger
	maxPause    time.Duration // 0: no pause
	pauseSet    bool

	latencyTolerance float64 // 0: no latency signal
}

// LimiterOptions passes options to every semaphore and rate limit (e.g.
// limiter.TTL, limiter.MaxHold, limiter.ReleaseTimeout, limiter.Observe,
// and limiter.Adaptive: a rate learned from the upstream's 429s); they
// override the options the limiter.Client was made with.
// The config's AcquireTimeout overrides theirs. A bad
// option makes Middleware or NewTransport return the limiter's
// *ArgumentError.
func LimiterOptions(opts ...limiter.NameOption) Option {
	return func(o *options) { o.limiterOpts = append(o.limiterOpts, opts...) }
}

// RateOptions passes options to the rate limits alone, after
// LimiterOptions (so they win): RateOptions(limiter.Adaptive(1, 30))
// learns the Rate from the upstream's 429s and leaves the Limit fixed,
// for an upstream whose concurrency is known and whose rate is not (a
// 429 cannot say which of its limits refused, so learning both cuts
// both). SemaphoreOptions is its twin for the semaphores. A bad option
// makes Middleware or NewTransport return the limiter's *ArgumentError
// when the config has a Rate (a Limit, for SemaphoreOptions); else it is
// never used.
func RateOptions(opts ...limiter.NameOption) Option {
	return func(o *options) { o.rateOpts = append(o.rateOpts, opts...) }
}

// SemaphoreOptions passes options to the semaphores alone (see
// RateOptions).
func SemaphoreOptions(opts ...limiter.NameOption) Option {
	return func(o *options) { o.semOpts = append(o.semOpts, opts...) }
}

// PauseOnRetryAfter bounds the pause a Transport sets when
// the upstream answers 429 Too Many Requests or 503 Service Unavailable
// with a Retry-After header (default 5 minutes, at most 24 hours, the
// limiter's bound on a pause); 0 turns pausing off. Such an answer also
// cuts the name's rate and limit where they are learned
// (limiter.Adaptive in LimiterOptions, RateOptions or SemaphoreOptions;
// inspect.Inspector.Overload), with or without a
// Retry-After, unless pausing is off; an answer that advertises a spent
// quota (RateLimit or X-RateLimit-Remaining 0) pauses until its reset,
// within the same bound. See
// Transport.RoundTrip. Middleware ignores it. A bound outside [0, 24h]
// makes NewTransport return an *limiter.ArgumentError naming
// "PauseOnRetryAfter".
func PauseOnRetryAfter(max time.Duration) Option {
	return func(o *options) { o.maxPause, o.pauseSet = max, true }
}

// Logger sets where failed releases, failed pauses, Redis failures and
// refused weights are logged (default slog.Default()). Lost leases are logged by the
// limiter (limiter.Logger).
func Logger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// defaultMaxPause is PauseOnRetryAfter's default, and maxPause its
// bound (the limiter's on a pause).
const (
	defaultMaxPause = 5 * time.Minute
	maxPause        = 24 * time.Hour
)

// common is what the middleware and the transport share: validated
// fields, the limiter options and the gate cache.
type common struct {
	name           string
	acquireTimeout time.Duration // < 0: no wait
	maxPause       time.Duration // 0: no pause
	logger         *slog.Logger
	gates          *gates

	latencyTolerance float64 // 0: no latency signal (CutOnLatency)
}

// caps are the configs' fields that newCommon validates.
type caps struct {
	name           string
	limit          int64
	rate           limiter.Rate
	acquireTimeout time.Duration
}

// newCommon validates what both configs have and makes the gate cache.
// limiter.Rate.Validate checks the rate; probes (Client.Semaphore and
// Client.RateLimit send nothing to Redis) report a bad name, limit or
// limiter option, a Redlock client for a rate, or a closed client,
// now rather than on the first request; a bad Name, Limit or Rate as a
// *limiter.ArgumentError naming the config's field.
func newCommon(client *limiter.Client, c caps, opts []Option) (common, error) {
	if client == nil {
		return common{}, fmt.Errorf("httplimit: %w", &limiter.ArgumentError{Arg: "client", Value: nil, Reason: "must not be nil"})
	}
	o := options{maxPause: defaultMaxPause}
	for _, fn := range opts {
		if fn != nil {
			fn(&o)
		}
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if o.maxPause < 0 || o.maxPause > maxPause {
		return common{}, fmt.Errorf("httplimit: %w", &limiter.ArgumentError{Arg: "PauseOnRetryAfter", Value: o.maxPause,
			Reason: "must be between 0 (no pause) and " + maxPause.String()})
	}
	if err := checkTolerance(o.latencyTolerance); err != nil {
		return common{}, err
	}
	if c.acquireTimeout == 0 {
		c.acquireTimeout = defaultAcquireTimeout
	}
	g, err := newCheckedGates(client, c,
		slices.Concat(o.limiterOpts, o.semOpts),
		slices.Concat(o.limiterOpts, o.rateOpts))
	if err != nil {
		return common{}, fmt.Errorf("httplimit: %w", configError(err))
	}
	return common{name: c.name, acquireTimeout: c.acquireTimeout, maxPause: o.maxPause, logger: o.logger, gates: g,
		latencyTolerance: o.latencyTolerance}, nil
}

// newCheckedGates makes the gate cache once a probe of each part of a
// gate was made without error.
func newCheckedGates(client *limiter.Client, c caps, semOpts, rateOpts []limiter.NameOption) (*gates, error) {
	hasRate := c.rate != (limiter.Rate{})
	if c.limit < 0 || (c.limit == 0 && !hasRate) {
		return nil, &limiter.ArgumentError{Arg: "limit", Value: c.limit, Reason: "must be >= 1, or 0 with a Rate"}
	}
	// AcquireTimeout alone (with the request's context) bounds the wait.
	semOpts = append(semOpts, limiter.AcquireTimeout(max(c.acquireTimeout, 0)))
	// A rate limit's AcquireTimeout of 0 would not bound its wait: 1ns
	// lets through only a slot that is now.
	rateOpts = append(rateOpts, limiter.AcquireTimeout(max(c.acquireTimeout, time.Nanosecond)))
	if hasRate {
		if err := c.rate.Validate(); err != nil {
			return nil, err // "rate.Burst": configError makes it Rate.Burst
		}
		// A valid rate: what is left to refuse is an option, a Redlock
		// client or a closed one.
		if _, err := client.RateLimit(c.name, c.rate, rateOpts...); err != nil {
			return nil, err
		}
	}
	if c.limit > 0 {
		if _, err := client.Semaphore(c.name, c.limit, semOpts...); err != nil {
			return nil, err
		}
	}
	return newGates(client, c.limit, c.rate, semOpts, rateOpts), nil
}

// configError renames the limiter's argument in a *limiter.ArgumentError
// to the config's field ("rate.Burst" is "Rate.Burst").
func configError(err error) error {
	var ae *limiter.ArgumentError
	if !errors.As(err, &ae) {
		return err
	}
	arg, rest, _ := strings.Cut(ae.Arg, ".")
	field, ok := configFields[arg]
	if !ok {
		return err
	}
	if rest != "" {
		field += "." + rest
	}
	return &limiter.ArgumentError{Arg: field, Value: ae.Value, Reason: ae.Reason}
}

// configFields are the config's fields that the limiter validates, by
// the names of its arguments.
var configFields = map[string]string{"name": "Name", "limit": "Limit", "rate": "Rate"}
