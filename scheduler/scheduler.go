package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/robfig/cron/v3"

	"github.com/redsem/redsem/limiter"
)

// tickRetention keeps a finished tick's task id reserved (unless the job
// sets its own Retention).
const tickRetention = time.Minute

// defaultLockTTL is a Job's TTL when it does not say.
const defaultLockTTL = time.Minute

// Job is one scheduled task and the lock that keeps its runs apart.
type Job struct {
	// Name identifies the job in metrics, logs and task ids (required).
	Name string
	// Spec is a cron spec, with an optional leading seconds field
	// ("*/10 * * * * *", "0 3 * * *") or a descriptor ("@daily",
	// "@every 2s"). "@every d" ticks at the multiples of d since the Unix
	// epoch (not d after the scheduler started), so that every scheduler
	// process ticks at the same times. Ignored by Enqueue.
	Spec string
	// TaskType and Payload make the task; Options are passed to
	// asynq's Enqueue. A per-tick TaskID is added, and Retention(1m)
	// unless Options set one: asynq refuses a duplicate id only while
	// the task is kept.
	TaskType string
	Payload  []byte
	Options  []asynq.Option
	// Lock names the lock (default Name); Limit is how many runs may be
	// in flight at once (default 1: a mutex).
	Lock  string
	Limit int64
	// TTL must cover the time from enqueue to a worker adopting the lease
	// (default 1 minute); a task picked up later is skipped. A run
	// that fails keeps the lock for its retry for the retry delay plus
	// TTL: a retry picked up later than that is skipped too.
	TTL time.Duration
}

// Option configures a Scheduler or Adopt.
type Option func(*options)

type options struct {
	location    *time.Location
	metrics     *Collector
	logger      *slog.Logger
	limiterOpts []limiter.NameOption
	ttl         time.Duration        // Adopt: the worker's TTL
	retryDelay  asynq.RetryDelayFunc // Adopt: how long a failed run keeps the lock for its retry
}

// Location sets the time zone of cron specs (default time.Local).
func Location(loc *time.Location) Option { return func(o *options) { o.location = loc } }

// Metrics counts ticks, skips, enqueues and adoptions in c.
func Metrics(c *Collector) Option { return func(o *options) { o.metrics = c } }

// Logger sets where skips, failures and adoptions are logged (default
// slog.Default()).
func Logger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// LimiterOptions passes options to every lock (e.g.
// limiter.ReleaseTimeout); they override the options the limiter.Client
// was made with (give limiter.Prefix to limiter.New, the same in the
// scheduler and the workers). A bad option makes Adopt, Register or Enqueue return the limiter's
// *ArgumentError.
func LimiterOptions(opts ...limiter.NameOption) Option {
	return func(o *options) { o.limiterOpts = append(o.limiterOpts, opts...) }
}

// WorkerTTL sets the TTL an adopting worker keeps the lease with (default
// limiter.DefaultTTL); it is refreshed while the handler runs, and bounds
// how long a crashed worker keeps the lock. A TTL the limiter refuses
// (below 5ms) makes Adopt return its *ArgumentError naming "TTL".
func WorkerTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// RetryDelayFunc sets how long, for Adopt, a failed run keeps the job's
// lock for asynq's retry (default asynq.DefaultRetryDelayFunc), before the
// job's TTL for the pick-up is added. The task returns the delay as the
// RetryIn of an *asynqmw.RetryError, so that asynq uses it when the
// server's Config has asynqmw.RetryDelay. A nil fn keeps the default.
func RetryDelayFunc(fn asynq.RetryDelayFunc) Option {
	return func(o *options) {
		if fn != nil {
			o.retryDelay = fn
		}
	}
}

// lock returns the semaphore of a lock of lc with ttl. With refresh false
// nothing keeps its leases alive: they live on in Redis for another
// process to take over (the scheduler's lock for the worker, a kept lock
// for the retry).
func (o options) lock(lc *limiter.Client, name string, limit int64, ttl time.Duration, refresh bool) (*limiter.Semaphore, error) {
	opts := append(slices.Clone(o.limiterOpts), limiter.TTL(ttl))
	if !refresh {
		opts = append(opts, limiter.RefreshInterval(0))
	}
	return lc.Semaphore(name, limit, opts...)
}

func newOptions(opts []Option) options {
	o := options{location: time.Local, logger: slog.Default(), ttl: limiter.DefaultTTL, retryDelay: asynq.DefaultRetryDelayFunc}
	for _, fn := range opts {
		if fn != nil {
			fn(&o)
		}
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	return o
}

// Scheduler runs jobs on their cron schedules; see the package doc.
type Scheduler struct {
	lc     *limiter.Client
	client *asynq.Client
	opts   options
	cron   *cron.Cron
	parser cron.Parser
}

// New returns a Scheduler that takes locks with semaphores of lc and
// enqueues with client. Nothing runs until Start. A nil lc or client, or a
// nil Location, gives an error wrapping a *limiter.ArgumentError naming it.
//
// Close lc only once Stop's context is done: ticks after Close fail with
// limiter.ErrClosed (logged, nothing enqueued). Close leaves the locks of
// ticks already enqueued in Redis, for the workers that adopt them.
func New(lc *limiter.Client, client *asynq.Client, opts ...Option) (*Scheduler, error) {
	if lc == nil {
		return nil, errorf("", &limiter.ArgumentError{Arg: "lc", Value: nil, Reason: "must not be nil"})
	}
	if client == nil {
		return nil, errorf("", &limiter.ArgumentError{Arg: "client", Value: nil, Reason: "must not be nil"})
	}
	o := newOptions(opts)
	if o.location == nil {
		return nil, errorf("", &limiter.ArgumentError{Arg: "Location", Value: nil, Reason: "must not be nil"})
	}
	parser := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	return &Scheduler{
		lc: lc, client: client, opts: o, parser: parser,
		cron: cron.New(cron.WithLocation(o.location), cron.WithParser(parser)),
	}, nil
}

// Register adds a job; a bad spec or job gives an error wrapping a
// *limiter.ArgumentError naming the field (a closed lc: limiter.ErrClosed).
// Jobs may be registered before or after Start. Each tick is bounded by
// the job's TTL and returns nothing: a busy lock is counted
// (EventSkippedBusy) and logged at Debug; an enqueue asynq refuses is
// counted (EventEnqueueFailed) and its lock released, and logged at Debug
// when another scheduler already enqueued the tick, else at Warn; a Redis
// failure, or limiter.ErrClosed once lc is closed, is logged at Warn.
func (s *Scheduler) Register(job Job) error {
	job, lock, err := s.check(job)
	if err != nil {
		return err
	}
	schedule, err := s.parser.Parse(job.Spec)
	if err != nil {
		return errorf(job.Name, &limiter.ArgumentError{Arg: "Spec", Value: job.Spec, Reason: err.Error()})
	}
	if every, ok := schedule.(cron.ConstantDelaySchedule); ok {
		schedule = aligned{every.Delay}
	}
	var id atomic.Int64
	entry := s.cron.Schedule(schedule, cron.FuncJob(func() {
		// The entry's scheduled time, not the clock: schedulers whose
		// clocks or wake-ups differ still agree on the tick's id.
		at := s.cron.Entry(cron.EntryID(id.Load())).Prev
		if at.IsZero() {
			at = time.Now().Round(time.Second)
		}
		s.tick(job, lock, at)
	}))
	id.Store(int64(entry))
	return nil
}

// aligned is robfig/cron's "@every d" ticking at the multiples of d since
// the Unix epoch: the same instants in every process, whenever it started.
type aligned struct{ every time.Duration }

// Next returns the first multiple of every after t.
func (a aligned) Next(t time.Time) time.Time {
	d := a.every.Nanoseconds()
	return time.Unix(0, (t.UnixNano()/d+1)*d).In(t.Location())
}

// Start runs the schedules in the background, until Stop. Ticks do not
// return errors: see Register for how each outcome is counted and logged.
func (s *Scheduler) Start() { s.cron.Start() }

// Stop stops the schedules; the returned context is done once running
// ticks have finished (Stop cancels none: each is bounded by its job's
// TTL). Close the limiter Client after that. Locks already handed to
// workers stay theirs.
func (s *Scheduler) Stop() context.Context { return s.cron.Stop() }

// check validates job, fills in its defaults and returns its lock: the
// semaphore the scheduler takes it with, unrefreshed, so that the lease
// lives on in Redis after the tick for the worker to adopt.
func (s *Scheduler) check(job Job) (Job, *limiter.Semaphore, error) {
	bad := func(field string, v any, reason string) (Job, *limiter.Semaphore, error) {
		return job, nil, errorf(job.Name, &limiter.ArgumentError{Arg: field, Value: v, Reason: reason})
	}
	switch {
	case job.Name == "":
		return bad("Name", `""`, "must not be empty")
	case job.TaskType == "":
		return bad("TaskType", `""`, "must not be empty")
	case job.Limit < 0:
		return bad("Limit", job.Limit, "must be >= 1")
	case job.TTL < 0:
		return bad("TTL", job.TTL, "must be > 0")
	}
	if job.Lock == "" {
		job.Lock = job.Name
	}
	if job.Limit == 0 {
		job.Limit = 1
	}
	if job.TTL == 0 {
		job.TTL = defaultLockTTL
	}
	lock, err := s.opts.lock(s.lc, job.Lock, job.Limit, job.TTL, false)
	if err != nil {
		return job, nil, errorf(job.Name, err)
	}
	return job, lock, nil
}

// errorf says that err comes from the scheduler, and which job's.
func errorf(job string, err error) error {
	if job == "" {
		return fmt.Errorf("redsem scheduler: %w", err)
	}
	return fmt.Errorf("redsem scheduler: job %s: %w", job, err)
}

func (s *Scheduler) tick(job Job, lock *limiter.Semaphore, at time.Time) {
	s.opts.metrics.add(job.Name, EventTick)
	// Every scheduler process computes the same id for the same tick, so
	// asynq refuses a second enqueue of it (while the task is retained).
	taskID := fmt.Sprintf("%s:%d", job.Name, at.Unix())
	ctx, cancel := context.WithTimeout(context.Background(), job.TTL)
	defer cancel()
	_, err := s.enqueue(ctx, job, lock, taskID)
	switch {
	case errors.Is(err, limiter.ErrBusy):
		s.opts.logger.Debug("redsem scheduler: tick skipped", "job", job.Name, "lock", job.Lock, "reason", "lock held")
	case errors.Is(err, asynq.ErrTaskIDConflict):
		s.opts.logger.Debug("redsem scheduler: tick skipped", "job", job.Name, "task", taskID, "reason", "enqueued by another scheduler")
	case err != nil:
		s.opts.logger.Warn("redsem scheduler: tick failed", "job", job.Name, "err", err)
	}
}

// Enqueue runs one tick of job now, outside any schedule: it takes the
// lock (never waiting) or returns an error matching limiter.ErrBusy, then
// enqueues the task carrying the ticket and leaves the lock to the worker
// that adopts it (it lapses at the job's TTL if none does). ctx bounds
// both calls: if it ends, or Redis fails, the error is returned wrapped
// and nothing is enqueued. If the enqueue fails, the lock is released
// (detached from ctx) and the error returned. A bad job gives an error
// wrapping a *limiter.ArgumentError; a closed lc, limiter.ErrClosed.
func (s *Scheduler) Enqueue(ctx context.Context, job Job) (*asynq.TaskInfo, error) {
	job, lock, err := s.check(job)
	if err != nil {
		return nil, err
	}
	return s.enqueue(ctx, job, lock, job.Name+":"+uuid.NewString())
}

func (s *Scheduler) enqueue(ctx context.Context, job Job, lock *limiter.Semaphore, taskID string) (*asynq.TaskInfo, error) {
	// The lease names the tick (task ids are unique per queue); each run
	// that adopts it gets a new fencing token.
	lease, err := lock.TryAcquire(ctx, limiter.ID(queueOf(job.Options)+":"+taskID))
	if err != nil {
		if errors.Is(err, limiter.ErrBusy) {
			s.opts.metrics.add(job.Name, EventSkippedBusy)
		}
		return nil, errorf(job.Name, err)
	}
	headers := map[string]string{
		headerTicket: lease.Ticket().String(),
		headerLimit:  strconv.FormatInt(job.Limit, 10),
		headerJob:    job.Name,
		headerTTL:    job.TTL.String(),
	}
	task := asynq.NewTaskWithHeaders(job.TaskType, job.Payload, headers)
	opts := append(slices.Clip(job.Options), asynq.TaskID(taskID))
	if !slices.ContainsFunc(job.Options, func(o asynq.Option) bool { return o.Type() == asynq.RetentionOpt }) {
		// asynq refuses a duplicate task id only while the task exists:
		// keep a finished tick a while, so a late scheduler's copy of it
		// is refused even after a fast run released the lock.
		opts = append(opts, asynq.Retention(tickRetention))
	}
	info, err := s.client.EnqueueContext(ctx, task, opts...)
	if err != nil {
		s.opts.metrics.add(job.Name, EventEnqueueFailed)
		// Detached from ctx, bounded by the limiter's ReleaseTimeout.
		if rerr := lease.Release(ctx); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return nil, errorf(job.Name, fmt.Errorf("enqueue: %w", err))
	}
	lease.StopRefresh() // the worker keeps it from here
	s.opts.metrics.add(job.Name, EventEnqueued)
	return info, nil
}

// queueOf returns the queue the options name (asynq's default "default").
func queueOf(opts []asynq.Option) string {
	q := "default"
	for _, o := range opts {
		if o != nil && o.Type() == asynq.QueueOpt {
			if v, ok := o.Value().(string); ok {
				q = v
			}
		}
	}
	return q
}
