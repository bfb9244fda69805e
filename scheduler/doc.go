// Package scheduler hands a held lock from a cron process to the asynq
// worker that runs the task, so that only one run of a job is in flight
// even though the task executes later, somewhere else.
//
//	lc, _ := limiter.New(rdb)                // one per process; Close it last
//	s, _ := scheduler.New(lc, asynqClient)   // cron process
//	adopt, _ := scheduler.Adopt(lc)          // worker process
//	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
//		IsFailure:      asynqmw.IsFailure(nil),  // a busy lock is not a failure
//		RetryDelayFunc: asynqmw.RetryDelay(nil), // a retry comes while its lock is kept
//	})
//
// Cron side (Scheduler): on each tick of a job, take its lock with
// TryAcquire (refresh off: the job's TTL must cover the wait until a
// worker picks the task up); if it is held, skip the tick; else enqueue
// the task with the lease's ticket in its headers and a per-tick task id
// (job:unix-seconds), so two scheduler processes never enqueue one tick
// twice. Ticks fall at the same instants in every process: cron specs by
// nature, and "@every d" because it ticks at the multiples of d since the
// Unix epoch. The lease id is queue:taskID: it names the tick. A failed
// enqueue releases the lock at once.
//
// Worker side (Adopt): a middleware that takes the lease over (a transfer:
// a new fencing token per run) with the worker's TTL and runs the handler
// under it (limiter.Lease.Run): the lease is kept alive while the handler
// runs, its context (which limiter.LeaseFrom gives the lease, for its
// fencing token) is cancelled with cause limiter.ErrLeaseLost if the lease
// is lost, and the lease is released when the handler returns. A handler
// that fails while asynq will retry the task keeps the lock for that retry
// instead (an *asynqmw.RetryError; see asynqmw.RetryDelay), so no other
// tick runs in between, and the retry takes it over. A task whose lock is
// gone (it waited longer than the TTL, or its run already ended) is not
// run: it returns asynq.SkipRetry. A retry that finds an earlier run of
// its tick still running (past its deadline) is re-queued without
// spending a retry (an *asynqmw.BusyError) until that run returns.
//
// The worker's asynq.Config takes asynqmw.IsFailure and
// asynqmw.RetryDelay, once, whether its handlers go through Adopt,
// asynqmw's middleware or both: the two middlewares return the same
// errors.
//
// Adoption is its own middleware rather than an asynqmw rule because it
// never waits for a permit: it continues one specific lease or refuses
// the task.
package scheduler
