package asynqmw

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter"
)

// defaultLastTryTimeout is LastTryAcquireTimeout's default.
const defaultLastTryTimeout = time.Minute

// Option configures New.
type Option func(*options)

type options struct {
	metrics        *Collector
	logger         *slog.Logger
	limiterOpts    []limiter.NameOption
	semOpts        []limiter.NameOption // after limiterOpts, semaphores only
	rateOpts       []limiter.NameOption // after limiterOpts, rate limits only
	lastTryTimeout time.Duration
	maxGated       time.Duration
	inspector      *asynq.Inspector
	maxGatedSet    bool
	park           redis.UniversalClient
	parkSet        bool
}

// Metrics reports gated tasks, waits, busy re-queues, lost leases, rate
// waits, unused rate slots and pauses to c, labelled by rule name (never
// by key).
func Metrics(c *Collector) Option { return func(o *options) { o.metrics = c } }

// Logger sets where lost leases and failed releases are logged (default
// slog.Default()).
func Logger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// LimiterOptions passes options to every semaphore and rate limit (e.g.
// limiter.ReleaseTimeout, limiter.MaxHold, limiter.RestartQuarantine, and
// limiter.Adaptive: a rule's Rate learned from the handlers' Pause);
// they override the options the limiter.Client was made with. The rules'
// TTL and AcquireTimeout override the limiter's TTL and AcquireTimeout. A bad option makes New return the
// limiter's *ArgumentError. Note that limiter.Observe labels by semaphore
// name, which for a Key rule is one series per key: the middleware's own
// Metrics are labelled by rule.
//
// limiter.ReleaseTimeout (default 1s) bounds the release after a handler
// returns. The release does not use the handler's context, which asynq
// cancels on shutdown or when it loses its own lease on the task; one
// that does not finish in time is logged and the permit comes back at
// the rule's TTL.
func LimiterOptions(opts ...limiter.NameOption) Option {
	return func(o *options) { o.limiterOpts = append(o.limiterOpts, opts...) }
}

// RateOptions passes options to the rules' rate limits alone, after
// LimiterOptions (so they win): RateOptions(limiter.Adaptive(1, 30))
// learns a Rate from the handlers' Pause and leaves every Limit fixed,
// for an upstream whose concurrency is known and whose rate is not (a
// 429 cannot say which of its limits refused, so learning both cuts
// both). SemaphoreOptions is its twin for the semaphores. A bad option
// makes New return the limiter's *ArgumentError, as LimiterOptions does,
// when a rule has a Rate (a Limit, for SemaphoreOptions); else it is
// never used.
func RateOptions(opts ...limiter.NameOption) Option {
	return func(o *options) { o.rateOpts = append(o.rateOpts, opts...) }
}

// SemaphoreOptions passes options to the rules' semaphores alone (see
// RateOptions).
func SemaphoreOptions(opts ...limiter.NameOption) Option {
	return func(o *options) { o.semOpts = append(o.semOpts, opts...) }
}

// LastTryAcquireTimeout replaces the rules' AcquireTimeout on a task's
// last try (default 1 minute): the same bound on the wait for the
// permits, for the run after which asynq archives the task whatever it
// returns. Such a task waits longer rather than be archived after one
// short wait, holding its asynq worker slot meanwhile; the task's
// deadline bounds the wait too (and, with MaxGated, the time left of it).
// If no permit frees within d, the task returns a *BusyError and is
// archived. d <= 0 makes New return a *limiter.ArgumentError naming
// LastTryAcquireTimeout.
func LastTryAcquireTimeout(d time.Duration) Option { return func(o *options) { o.lastTryTimeout = d } }

// MaxGated caps the total time a task may spend gated across its busy
// re-queues: a bound across runs, unlike AcquireTimeout, which bounds one
// run's wait. A busy re-queue is free (IsFailure), so without a cap a
// task whose permits never free is re-queued forever. With it, a task
// that returns busy looks up, with insp, when its busy re-queues began
// (the time is kept in its last error, which asynq stores); once that is
// more than d ago, its *BusyError has Exceeded set and IsFailure counts
// it as a failure, so asynq spends a retry on each further busy return
// and archives the task when they run out. The clock restarts after any
// other error. The lookup is one read of asynq's Redis, made at most once
// per run and never for a task that gets its permits within
// AcquireTimeout: on busy returns, and on a last try that has waited
// AcquireTimeout (such a task waits at most what is left of d, but at
// least AcquireTimeout). If the lookup fails, the clock starts anew at
// this run. d <= 0 or a nil insp makes New return a
// *limiter.ArgumentError naming MaxGated.
func MaxGated(d time.Duration, insp *asynq.Inspector) Option {
	return func(o *options) { o.maxGated, o.inspector, o.maxGatedSet = d, insp, true }
}

type middleware struct {
	client  *limiter.Client
	rules   []*rule
	opts    options
	parking *parking // nil without Park
	waiting waiting  // handlers waiting in a gate's queue
	applied appliedRates
}

// errGateTimeout ends a wait that is to be reported as busy.
var errGateTimeout = errors.New("asynqmw: no permit within the wait")

// New returns the middleware for mux.Use, gating tasks with semaphores of
// client. Semaphores are cheap values made per task (one per matching
// rule, and per key of a Key rule): nothing is kept per key between tasks.
// Close client only after the asynq servers using the middleware have
// shut down: the waits its Close ends fail with limiter.ErrClosed (asynq
// retries them as errors), and the leases of handlers still running are
// released, their contexts cancelled with cause limiter.ErrNotHeld.
//
// Bad arguments give an error wrapping a *limiter.ArgumentError
// (errors.Is(err, limiter.ErrInvalidArgument)) that names what is wrong:
// "client" when it is nil, "rules" when there are none, rules[i].Field
// for a rule's field (e.g. rules[1].Limit), the option for a bad option
// of this package, or the limiter's own name for a bad LimiterOptions
// value or a TTL it refuses. A closed client gives limiter.ErrClosed.
// Nothing is sent to Redis.
//
// A task runs its handler only while it holds a permit of every rule
// with a Limit and within a slot of the rate of every rule with a Rate.
// It takes the permits one after the other in the order of the rules (a
// name's place is that of its first rule; two keys of one name go in key
// order), so tasks matching the same rules never deadlock, and holds the
// earlier permits while it waits for the later ones: list the narrowest
// rules (per key) first, so that a task waiting for its customer's
// permit does not sit on a fleet-wide one. Every process must list
// shared rules in the same order. Holding its permits, it reserves its
// slots and sleeps until them, when they are near (the time the rate
// takes to serve the permits' holders, at most 1s): a slot then always
// goes to a task that can use it. A slot further off (a pause, a rate
// that other rules share) is waited for holding nothing: the task gives
// its permits back, sleeps until the slot, and takes them again. The
// permits are released in reverse order when the handler returns.
//
// While it waits, a gated task occupies one of its asynq server's
// Concurrency slots: tasks no rule matches get only the slots left. Each
// rule's AcquireTimeout bounds the wait for its own permit and slot (the
// whole wait, the sum of them and a second), ending a little before the
// task's deadline if that comes first, and on the task's last try
// LastTryAcquireTimeout bounds it. If it runs out, a slot would be
// further off, or Redis fails, the task gives back what it took and
// returns a *BusyError (see IsFailure and RetryDelay; RetryIn is the end
// of a pause or a restart quarantine when the wait ran out for one);
// if the task's context ends first (asynq's deadline, shutdown, or its
// own lease on the task lost), an error wrapping the context's cause;
// limiter.ErrClosed is returned wrapped. asynq retries these as for any
// error.
//
// Each run of a task (a first try, a busy re-queue, a retry after a
// failure or a deadline) holds its own leases, with the id
// queue:taskID:retryCount:random, so a handler that outlives its deadline
// and asynq's retry of the task hold a permit each and never share one;
// the permit of a run whose worker crashed comes back at the rule's TTL.
// The handler runs under the leases (limiter.Lease.Run), nested:
// limiter.LeaseFrom(ctx) gives the last one taken. If a lease is lost
// while the handler runs, the handler's context is cancelled with cause
// limiter.ErrLeaseLost, and the loss is counted and logged. The leases are
// released when the handler returns or panics, whatever it returns, also
// when asynq has given up on it; a failed release is logged and the permit
// comes back at the rule's TTL. The task returns what the handler
// returned: neither a lost lease nor a failed release turns a handler's
// success into a failure, and a failure that a lost lease caused (the
// handler returned its context's end) is a *BusyError, re-queued after
// about the rule's TTL. A *PauseError the handler returns pauses its
// rules and becomes a *BusyError (see PauseError). A task whose wait
// for a permit runs out while its rule is paused (inspect.Inspector.Pause
// holds semaphores too) comes back at the pause's end: its *BusyError has
// Paused set and RetryIn until then.
func New(client *limiter.Client, rules []Rule, opts ...Option) (asynq.MiddlewareFunc, error) {
	if client == nil {
		return nil, fmt.Errorf("asynqmw: %w", &limiter.ArgumentError{Arg: "client", Value: nil, Reason: "must not be nil"})
	}
	rs, err := validate(rules)
	if err != nil {
		return nil, fmt.Errorf("asynqmw: %w", err)
	}
	m := &middleware{client: client, rules: rs, opts: options{logger: slog.Default(), lastTryTimeout: defaultLastTryTimeout}}
	for _, o := range opts {
		if o != nil {
			o(&m.opts)
		}
	}
	if m.opts.logger == nil {
		m.opts.logger = slog.Default()
	}
	if m.opts.lastTryTimeout <= 0 {
		return nil, fmt.Errorf("asynqmw: %w", &limiter.ArgumentError{Arg: "LastTryAcquireTimeout", Value: m.opts.lastTryTimeout, Reason: "must be > 0"})
	}
	if m.opts.maxGatedSet {
		switch {
		case m.opts.maxGated <= 0:
			return nil, fmt.Errorf("asynqmw: %w", &limiter.ArgumentError{Arg: "MaxGated", Value: m.opts.maxGated, Reason: "must be > 0"})
		case m.opts.inspector == nil:
			return nil, fmt.Errorf("asynqmw: %w", &limiter.ArgumentError{Arg: "MaxGated", Value: nil, Reason: "needs an *asynq.Inspector"})
		}
	}
	if m.opts.parkSet {
		if m.opts.park == nil {
			return nil, fmt.Errorf("asynqmw: %w", &limiter.ArgumentError{Arg: "Park", Value: nil, Reason: "needs asynq's Redis client"})
		}
		m.parking = newParking(m.opts.park)
	}
	for _, r := range rs {
		if err := m.limiterOptions(r); err != nil {
			return nil, err
		}
	}
	return m.wrap, nil
}

// limiterOptions sets the options of r's semaphores and rate limits and
// checks them, and r's Limit, with the limiter (nothing is sent
// to Redis). The rule's TTL and an unbounded AcquireTimeout come after
// the user's limiter options, so they win: waits are bounded here.
func (m *middleware) limiterOptions(r *rule) error {
	r.semOpts = slices.Concat(m.opts.limiterOpts, m.opts.semOpts, []limiter.NameOption{limiter.TTL(r.TTL), limiter.AcquireTimeout(0)})
	r.rateOpts = slices.Concat(m.opts.limiterOpts, m.opts.rateOpts, []limiter.NameOption{limiter.AcquireTimeout(0)})
	if r.Limit > 0 {
		if _, err := m.client.Semaphore(r.Name, r.Limit, r.semOpts...); err != nil {
			return fmt.Errorf("asynqmw: rules[%d]: %w", r.index, err)
		}
	}
	if r.hasRate() {
		// validate checked the rate: what is left to refuse is an option,
		// a Redlock client or a closed one.
		if _, err := m.client.RateLimit(r.Name, r.Rate, r.rateOpts...); err != nil {
			return fmt.Errorf("asynqmw: rules[%d]: %w", r.index, err)
		}
	}
	return nil
}

// gates returns the semaphores a task must hold, in acquisition order,
// each once.
func (m *middleware) gates(ctx context.Context, t *asynq.Task) ([]gate, error) {
	var gs []gate
	for _, r := range m.rules {
		g, ok, err := r.match(ctx, t)
		if err != nil {
			return nil, err
		}
		if ok && !slices.ContainsFunc(gs, func(h gate) bool { return h.name == g.name }) {
			gs = append(gs, g)
		}
	}
	slices.SortStableFunc(gs, func(a, b gate) int {
		return cmp.Or(cmp.Compare(a.r.order, b.r.order), cmp.Compare(a.name, b.name))
	})
	return gs, nil
}

func (m *middleware) wrap(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		gs, err := m.gates(ctx, t)
		if err != nil {
			return err
		}
		if len(gs) == 0 {
			return next.ProcessTask(ctx, t)
		}
		// Each gate's bound, one after the other, and a second more, so
		// that a gate's own bound (which says why) ends a wait first.
		acquireTimeout := time.Second
		for i := range gs {
			acquireTimeout += gs[i].bound
			if lastTry(ctx) {
				gs[i].bound = 0
			}
		}
		start := time.Now()
		// When the task's busy re-queues began (MaxGated): one lookup at
		// most, made only when needed.
		since := sync.OnceValue(func() time.Time { return m.since(ctx, start) })
		wait, stopWait := m.wait(ctx, acquireTimeout, since)
		defer stopWait()
		out, ran := m.gated(ctx, wait, stopWait, t, gs, runID(ctx), next)
		var pe *PauseError
		if ran && errors.As(out, &pe) {
			out = m.pause(ctx, t, gs, pe)
		}
		var busy *BusyError
		if !ran && errors.As(out, &busy) {
			m.explain(t, gs, busy)
		}
		// MaxGated counts every re-queue of a task that did not run to
		// its end: gated, paused, or cut short by a lost lease.
		if (!ran || pe != nil || errors.Is(out, limiter.ErrLeaseLost)) && errors.As(out, &busy) && m.opts.inspector != nil {
			busy.Since = since()
			busy.Exceeded = time.Since(busy.Since) > m.opts.maxGated
		}
		return out
	})
}

// explain fills in why busy's gate refused the task, from the limiter's
// refusal it wraps (no Redis call), and logs the re-queue with it.
func (m *middleware) explain(t *asynq.Task, gs []gate, busy *BusyError) {
	var lb *limiter.BusyError
	if busy.Reason == "" && errors.As(busy.Err, &lb) {
		busy.Reason, busy.ETA = lb.Reason(), lb.RetryIn
		for _, g := range gs {
			if g.name == busy.Semaphore && g.name != g.r.Name && busy.Reason == limiter.ReasonFull {
				busy.Reason = ReasonKeyLimit
			}
		}
	}
	m.opts.logger.Debug("asynqmw: busy, re-queued", "task", t.Type(), "name", busy.Semaphore,
		"reason", string(busy.Reason), "eta", busy.ETA, "retry_in", busy.RetryIn)
}

// runID names one run of a task in its lease ids: its queue and id (ids
// are unique per queue only), its retry count, then a unique part, since
// a busy re-queue or a retry after a lost asynq lease keeps the retry
// count. The unique part is the limiter's made-up id (limiter.IDPrefix),
// so that a release may grant a waiting task its permit directly (one
// attempt per permit, where a caller-given id took a wake-up and a
// second attempt: 22 of a fleet task's 74 Redis commands); a random one
// where the queue or task id has a space, which IDPrefix refuses.
func runID(ctx context.Context) limiter.AcquireOption {
	id, ok := asynq.GetTaskID(ctx)
	if !ok {
		return nil // not run by asynq: the limiter's made-up id
	}
	q, _ := asynq.GetQueueName(ctx)
	n, _ := asynq.GetRetryCount(ctx)
	prefix := q + ":" + id + ":" + strconv.Itoa(n) + ":"
	if strings.Contains(prefix, " ") {
		return limiter.ID(prefix + strconv.FormatUint(rand.Uint64(), 36))
	}
	return limiter.IDPrefix(prefix)
}

// wait returns the context that bounds a task's wait for all its permits,
// which ends with cause errGateTimeout, and its stop. With retries left:
// acquireTimeout, but ending a little before the task's deadline, so that
// the task returns busy (no retry spent) rather than fail on its deadline.
// On the last try (asynq archives at Retried >= MaxRetry whatever
// IsFailure says): LastTryAcquireTimeout, before the deadline, and with
// MaxGated not past since()+MaxGated unless that leaves less than
// acquireTimeout; since() is called only once the task has waited
// acquireTimeout.
func (m *middleware) wait(ctx context.Context, acquireTimeout time.Duration, since func() time.Time) (context.Context, context.CancelFunc) {
	wait, last := acquireTimeout, lastTry(ctx)
	if last {
		wait = m.opts.lastTryTimeout
	}
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		wait = min(wait, left-min(time.Second, left/10))
	}
	wctx, cancel := context.WithTimeoutCause(ctx, wait, errGateTimeout)
	if !last || m.opts.inspector == nil || wait <= acquireTimeout {
		return wctx, cancel
	}
	wctx, cut := context.WithCancelCause(wctx)
	check := time.AfterFunc(acquireTimeout, func() {
		if wctx.Err() != nil {
			return // the permits came: no lookup
		}
		end := time.AfterFunc(time.Until(since().Add(m.opts.maxGated)), func() { cut(errGateTimeout) })
		context.AfterFunc(wctx, func() { end.Stop() })
	})
	return wctx, func() { check.Stop(); cut(nil); cancel() }
}

// since returns when the task's busy re-queues began, as its last error
// says, or start.
func (m *middleware) since(ctx context.Context, start time.Time) time.Time {
	q, ok1 := asynq.GetQueueName(ctx)
	id, ok2 := asynq.GetTaskID(ctx)
	if ok1 && ok2 {
		if info, err := m.opts.inspector.GetTaskInfo(q, id); err == nil {
			if since, ok := parseSince(info.LastErr); ok && since.Before(start) {
				return since
			}
		}
	}
	return start
}

// lastTry reports whether a failure now would archive the task.
func lastTry(ctx context.Context) bool {
	retried, ok1 := asynq.GetRetryCount(ctx)
	maxRetry, ok2 := asynq.GetMaxRetry(ctx)
	return ok1 && ok2 && retried >= maxRetry
}
