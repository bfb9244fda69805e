package asynqmw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redsem/redsem/limiter"
)

// Option configures New.
type Option func(*options)

type options struct {
	metrics        *Collector
	logger         *slog.Logger
	limiterOpts    []limiter.Option
	releaseTimeout time.Duration // 0: the limiter Client's
	releaseSet     bool
}

// Metrics reports gated tasks, waits, busy re-queues and lost leases to c.
func Metrics(c *Collector) Option { return func(o *options) { o.metrics = c } }

// Logger sets where lost leases and failed releases are logged (default
// slog.Default()).
func Logger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// LimiterOptions passes options to every semaphore (e.g. limiter.Prefix,
// limiter.Metrics, limiter.ReleaseTimeout); they override the options the
// limiter.Client was made with. The rules' TTL and waits override the
// limiter's TTL, AcquireTimeout and AttemptsLimit. A bad option makes New
// return the limiter's *ArgumentError.
func LimiterOptions(opts ...limiter.Option) Option {
	return func(o *options) { o.limiterOpts = append(o.limiterOpts, opts...) }
}

// ReleaseTimeout bounds the release after a handler returns: it is
// LimiterOptions(limiter.ReleaseTimeout(d)). Without it, the limiter
// Client's ReleaseTimeout applies (limiter's default 1s). The release does
// not use the handler's context, which asynq cancels on shutdown or when
// it loses its own lease on the task; one that does not finish in time is
// logged and the permit comes back at the rule's TTL. d <= 0 makes New
// return a *ConfigError.
func ReleaseTimeout(d time.Duration) Option {
	return func(o *options) { o.releaseTimeout, o.releaseSet = d, true }
}

type middleware struct {
	client *limiter.Client
	rules  []Rule
	opts   options

	mu    sync.Mutex
	gates map[string]*limiter.Semaphore
}

// errGateTimeout ends a wait that is to be reported as busy.
var errGateTimeout = errors.New("asynqmw: no permit within the wait")

// New returns the middleware for mux.Use, gating tasks with semaphores of
// client (made here, one per rule name, and one per key of a Key rule on
// first use). Close client only after the asynq servers using the
// middleware have shut down: the waits its Close ends fail with
// limiter.ErrClosed (asynq retries them as errors), and the leases of
// handlers still running are released, their contexts cancelled with
// cause limiter.ErrNotHeld.
//
// A nil client gives a *limiter.ArgumentError naming "client"; invalid
// rules or options give a *ConfigError (or the limiter's *ArgumentError)
// naming what is wrong; a closed client gives limiter.ErrClosed. Nothing
// is sent to Redis.
//
// On a task a rule matches, the handler runs only while it holds a lease
// (id = the task id) on the rule's semaphore. If no permit frees within
// MaxWait, the task returns a *BusyError (see IsFailure and RetryDelay);
// if the task's own context ends first, its error wrapping the context's
// cause; a Redis failure is returned wrapped, and asynq retries as for
// any error. If the lease is lost while the handler runs, the handler's
// context is cancelled with cause limiter.ErrLeaseLost, and the loss is
// counted and logged. The lease is released when the handler returns or
// panics, whatever it returns, also when asynq has given up on it (a new
// run of the task, under the same lease id, waits for that release); a
// failed release is logged and the permit comes back at the rule's TTL.
// The task returns what the handler returned: neither a lost lease nor a
// failed release turns a handler's success into a failure.
func New(client *limiter.Client, rules []Rule, opts ...Option) (asynq.MiddlewareFunc, error) {
	if client == nil {
		return nil, &limiter.ArgumentError{Arg: "client", Value: nil, Reason: "must not be nil"}
	}
	rules, err := validate(rules)
	if err != nil {
		return nil, err
	}
	m := &middleware{client: client, rules: rules, gates: map[string]*limiter.Semaphore{},
		opts: options{logger: slog.Default()}}
	for _, o := range opts {
		if o != nil {
			o(&m.opts)
		}
	}
	if m.opts.logger == nil {
		m.opts.logger = slog.Default()
	}
	if m.opts.releaseSet {
		if m.opts.releaseTimeout <= 0 {
			return nil, &ConfigError{Rule: -1, Reason: "ReleaseTimeout must be > 0"}
		}
		m.opts.limiterOpts = append(m.opts.limiterOpts, limiter.ReleaseTimeout(m.opts.releaseTimeout))
	}
	for i, r := range rules {
		if _, err := m.gate(r, r.Name); err != nil {
			return nil, fmt.Errorf("asynqmw: rule %d: %w", i, err)
		}
	}
	return m.wrap, nil
}

// gate returns the semaphore of a name and TTL, made on first use (a Key
// rule makes one per key; entries are never evicted). The rule's TTL and
// an unbounded AcquireTimeout come after the user's limiter options, so
// they win: waits are bounded by the handler's context alone.
func (m *middleware) gate(r Rule, name string) (*limiter.Semaphore, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := fmt.Sprintf("%s/%v", name, r.TTL)
	if sem, ok := m.gates[key]; ok {
		return sem, nil
	}
	opts := append(slices.Clone(m.opts.limiterOpts), limiter.TTL(r.TTL), limiter.AcquireTimeout(0), limiter.AttemptsLimit(0))
	sem, err := m.client.Semaphore(name, r.Limit, opts...)
	if err != nil {
		return nil, err
	}
	m.gates[key] = sem
	return sem, nil
}

func (m *middleware) match(t *asynq.Task) (Rule, string, bool) {
	for _, r := range m.rules {
		if name, ok := r.matches(t); ok {
			return r, name, true
		}
	}
	return Rule{}, "", false
}

func (m *middleware) wrap(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		r, name, ok := m.match(t)
		if !ok {
			return next.ProcessTask(ctx, t)
		}
		sem, err := m.gate(r, name)
		if err != nil {
			return err
		}
		m.opts.metrics.gated(r.Name)
		opts := []limiter.AcquireOption{limiter.Weight(r.Weight)}
		if id, ok := asynq.GetTaskID(ctx); ok {
			opts = append(opts, limiter.ID(id))
		}
		start := time.Now()
		waitCtx, cancel := waitFor(ctx, r.MaxWait)
		lease, err := sem.Acquire(waitCtx, opts...)
		cancel()
		m.opts.metrics.waited(r.Name, time.Since(start))
		if err != nil {
			if errors.Is(err, errGateTimeout) {
				m.opts.metrics.requeued(r.Name)
				return &BusyError{Rule: r.Name, Semaphore: name, RetryIn: max(r.MaxWait, minRetryIn), err: err}
			}
			return fmt.Errorf("asynqmw: %s: %w", name, err)
		}
		return m.run(ctx, t, next, lease, r.Name)
	})
}

// waitFor bounds the wait for a permit. With retries left: MaxWait, but
// ending a little before the task's deadline, so that the task returns
// busy (no retry spent) rather than fail on its deadline. On the last try
// (asynq archives at Retried >= MaxRetry whatever IsFailure says, so busy
// would archive it): until the deadline.
func waitFor(ctx context.Context, maxWait time.Duration) (context.Context, context.CancelFunc) {
	if lastTry(ctx) {
		return context.WithCancel(ctx)
	}
	wait := maxWait
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		wait = min(wait, left-min(time.Second, left/10))
	}
	return context.WithTimeoutCause(ctx, wait, errGateTimeout)
}

// lastTry reports whether a failure now would archive the task.
func lastTry(ctx context.Context) bool {
	retried, ok1 := asynq.GetRetryCount(ctx)
	maxRetry, ok2 := asynq.GetMaxRetry(ctx)
	return ok1 && ok2 && retried >= maxRetry
}

// run runs the handler under the lease (see limiter.Lease.Run), which
// releases it when the handler returns or panics (asynq recovers the
// panic), unless it was lost. It returns the handler's error.
func (m *middleware) run(ctx context.Context, t *asynq.Task, next asynq.Handler, lease *limiter.Lease, rule string) error {
	defer func() { // also when the handler panicked
		if lost := lease.Err(); errors.Is(lost, limiter.ErrLeaseLost) {
			m.opts.metrics.lost(rule)
			m.opts.logger.Warn("asynqmw: lease lost while the handler ran", "task", t.Type(), "id", lease.ID(), "err", lost)
		}
	}()
	var herr error // the handler's own error, returned unchanged
	err := lease.Run(ctx, func(ctx context.Context) error {
		herr = next.ProcessTask(ctx, t)
		return herr
	})
	var rerr *limiter.ReleaseError
	if errors.As(err, &rerr) {
		// Not fatal: the permit comes back when the lease's TTL runs out.
		m.opts.logger.Warn("asynqmw: release failed", "task", t.Type(), "id", lease.ID(), "err", rerr)
	}
	return herr
}
