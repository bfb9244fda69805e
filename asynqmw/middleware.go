package asynqmw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
// limiter.Metrics). TTL and AcquireTimeout come from the rules.
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
	gates map[string]*gate
}

// gate is one semaphore seen two ways: tasks with retries left wait up to
// their rule's MaxWait; a task on its last try waits up to its deadline.
type gate struct {
	short, patient *limiter.Semaphore
}

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
	m := &middleware{rdb: rdb, rules: rules, gates: map[string]*gate{},
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

// gate returns the semaphores of a name, made on first use (a Key rule
// makes one per key).
func (m *middleware) gate(r Rule, name string) (*gate, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g, ok := m.gates[name]; ok {
		return g, nil
	}
	base := append([]limiter.Option{limiter.TTL(r.TTL)}, m.opts.limiterOpts...)
	short, err := limiter.NewSemaphore(m.rdb, name, r.Limit, append(base, limiter.AcquireTimeout(r.MaxWait))...)
	if err != nil {
		return nil, err
	}
	patient, err := limiter.NewSemaphore(m.rdb, name, r.Limit, append(base, limiter.AcquireTimeout(0))...)
	if err != nil {
		return nil, err
	}
	g := &gate{short: short, patient: patient}
	m.gates[name] = g
	return g, nil
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
		g, err := m.gate(r, name)
		if err != nil {
			return err
		}
		m.opts.metrics.gated(r.Name)
		opts := []limiter.AcquireOption{limiter.Weight(r.Weight)}
		if id, ok := asynq.GetTaskID(ctx); ok {
			opts = append(opts, limiter.ID(id))
		}
		sem := g.short
		if lastTry(ctx) {
			sem = g.patient
		}
		start := time.Now()
		lease, err := sem.Acquire(ctx, opts...)
		m.opts.metrics.waited(r.Name, time.Since(start))
		if err != nil {
			if errors.Is(err, limiter.ErrBusy) && ctx.Err() == nil {
				m.opts.metrics.requeued(r.Name)
				return &BusyError{Rule: r.Name, Semaphore: name, RetryIn: max(r.MaxWait, minRetryIn), err: err}
			}
			return fmt.Errorf("asynqmw: %s: %w", name, err)
		}
		return m.run(ctx, t, next, lease, r.Name)
	})
}

// lastTry reports whether a failure now would archive the task: asynq
// archives at Retried >= MaxRetry whatever IsFailure says.
func lastTry(ctx context.Context) bool {
	retried, ok1 := asynq.GetRetryCount(ctx)
	maxRetry, ok2 := asynq.GetMaxRetry(ctx)
	return ok1 && ok2 && retried >= maxRetry
}

func (m *middleware) run(ctx context.Context, t *asynq.Task, next asynq.Handler, lease *limiter.Lease, rule string) error {
	// Deferred, so a panicking handler (asynq recovers it) releases too.
	defer func() {
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
