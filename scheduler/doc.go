// Package scheduler hands a held lock from a cron process to the asynq
// worker that runs the task, so that only one run of a job is in flight
// even though the task executes later, somewhere else.
//
//	lc, _ := limiter.New(rdb) // one per process; Close it last
//	s, _ := scheduler.New(lc, asynqClient)  // cron process
//	adopt, _ := scheduler.Adopt(lc)         // worker process
//
// Cron side (Scheduler): on each tick of a job, take its lock with
// TryAcquire (refresh off: the TTL must cover the wait until a worker picks
// the task up); if it is held, skip the tick; else enqueue the task with
// the lease's ticket in its headers and a per-tick task id, so two
// scheduler processes never enqueue one tick twice. A failed enqueue
// releases the lock at once.
//
// Worker side (Adopt): a middleware that resumes the lease named by the
// ticket with the worker's TTL and runs the handler under it
// (limiter.Lease.Run): the lease is kept alive while the handler runs,
// its context (which limiter.LeaseFrom gives the lease, for its fencing
// token) is cancelled with cause limiter.ErrLeaseLost if the lease is
// lost, and the lease is released when the handler returns, whatever it
// returns. A task whose lease is gone (it waited longer than the TTL, or a
// retry of a run that already adopted it) is not run: it returns
// asynq.SkipRetry.
//
// Adoption is its own middleware rather than an asynqmw rule because it
// never waits and never re-queues: it continues one specific lease or
// refuses the task.
package scheduler
