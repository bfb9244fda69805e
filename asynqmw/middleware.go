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
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter"
)

// Option configures New.
type Option func(*options)

type options struct {
	metrics        *Collector
	logger         *slog.Logger
	limiterOpts    []limiter.Option
	releaseTimeout time.Duration
}

// Metrics reports gated tasks, waits, busy re-queues and lost leases to c.
func Metrics(c *Collector) Option { return func(o *options) { o.metrics = c } }

// Logger sets where lost leases and failed releases are logged (default
// slog.Default()).
func Logger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// LimiterOptions passes options to every semaphore (e.g. limiter.Prefix,
// limiter.Metrics). The rules' TTL and waits override the limiter's TTL,
// AcquireTimeout and AttemptsLimit.
func LimiterOptions(opts ...limiter.Option) Option {
	return func(o *options) { o.limiterOpts = append(o.limiterOpts, opts...) }
}

// ReleaseTimeout bounds the release after a handler returns (default 5s).
// The release does not use the handler's context, which asynq cancels on
// shutdown or when it loses its own lease on the task.
func ReleaseTimeout(d time.Duration) Option { return func(o *options) { o.releaseTimeout = d } }

type middleware struct {
	rdb   redis.UniversalClient
	rules []Rule
	opts  options

	mu    sync.Mutex
	gates map[string]*limiter.Semaphore
}

// errGateTimeout ends a wait that is to be reported as busy.
var errGateTimeout = errors.New("asynqmw: no permit within the wait")

// New returns the middleware for mux.Use. Invalid rules or options give a
// *ConfigError (or the limiter's *ArgumentError) naming what is wrong;
// nothing is sent to Redis.
//
// On a task a rule matches, the handler runs only while it holds a lease
// (id = the task id) on the rule's semaphore. If no permit frees within
// MaxWait, the task returns a *BusyError (see IsFailure and RetryDelay); a
// Redis failure is returned wrapped, and asynq retries as for any error.
// If the lease is lost while the handler runs, the handler's context is
// cancelled with cause limiter.ErrLeaseLost. The lease is released when
// the handler returns, whatever it returns.
func New(rdb redis.UniversalClient, rules []Rule, opts ...Option) (asynq.MiddlewareFunc, error) {
	rules, err := validate(rules)
	if err != nil {
		return nil, err
	}
	m := &middleware{rdb: rdb, rules: rules, gates: map[string]*limiter.Semaphore{},
		opts: options{logger: slog.Default(), releaseTimeout: 5 * time.Second}}
	for _, o := range opts {
		if o != nil {
			o(&m.opts)
		}
	}
	if m.opts.releaseTimeout <= 0 {
		return nil, &ConfigError{Rule: -1, Reason: "ReleaseTimeout must be > 0"}
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
	sem, err := limiter.NewSemaphore(m.rdb, name, r.Limit, opts...)
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

func (m *middleware) run(ctx context.Context, t *asynq.Task, next asynq.Handler, lease *limiter.Lease, rule string) error {
	// Deferred, so a panicking handler (asynq recovers it) releases too.
	defer func() {
		if ctx.Err() != nil {
			// asynq gave up on this run (deadline, shutdown, its own
			// lease) and may already be running the task again, under
			// the same lease id: releasing would take that run's
			// permit. Let the lease lapse after its TTL instead.
			lease.StopRefresh()
			return
		}
		relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), m.opts.releaseTimeout)
		defer relCancel()
		if err := lease.Release(relCtx); err != nil && !errors.Is(lease.Err(), limiter.ErrLeaseLost) {
			// Not fatal: the permit comes back when the lease's TTL runs out.
			m.opts.logger.Warn("asynqmw: release failed", "task", t.Type(), "id", lease.ID(), "err", err)
		}
	}()
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(lease.Context(), func() {
		// Before Release (stop runs first), the lease ends only by loss.
		m.opts.metrics.lost(rule)
		cancel(context.Cause(lease.Context()))
	})
	defer stop()
	return next.ProcessTask(runCtx, t)
}
