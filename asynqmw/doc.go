// Package asynqmw caps how many asynq task handlers run at once across
// every worker process, with semaphores from package limiter.
//
//	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}) // shared by everything below
//	lc, err := limiter.New(rdb) // one per process; Close it after the server shut down
//	defer lc.Close(ctx)
//	mw, err := asynqmw.New(lc, []asynqmw.Rule{
//		// every matching rule applies, narrowest first
//		{Name: "partner-customer", TypePrefix: "partner:", Key: customerOf, Limit: 1},
//		{Name: "partner-api", TypePrefix: "partner:", Limit: 5, AcquireTimeout: 5 * time.Second},
//	})
//	mux.Use(mw)
//	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
//		IsFailure:      asynqmw.IsFailure(nil),
//		RetryDelayFunc: asynqmw.RetryDelay(nil),
//	})
//
// where customerOf is a Rule.Key:
//
//	func customerOf(ctx context.Context, t *asynq.Task) (key string, ok bool)
//
// A gated task takes a permit of every rule that matches it (by type, type
// prefix, queue, key), one after the other in the order of the rules, and
// waits for them — woken by releases, not by polling — up to the smallest
// AcquireTimeout of those rules (the limiter's bound, under its name),
// ending a little before the task's deadline if that comes first. Then it
// gives back what it took and returns a *BusyError (errors.Is(err,
// limiter.ErrBusy)): with IsFailure and RetryDelay in the server's Config,
// asynq re-queues it without spending its retry budget; MaxGated caps how
// long a task may be re-queued so, across runs. A task with no retry
// budget left (asynq archives such a task whatever it returns) waits up
// to LastTryAcquireTimeout (default 1 minute) instead. A wait that the
// task's context or the limiter Client's Close ends, or a Redis failure,
// returns that error and asynq retries the task as for any error.
//
// IsFailure and RetryDelay are the one way this module's asynq
// middlewares talk to asynq's retries: scheduler.Adopt returns the same
// *BusyError (an earlier run still holds the job's lock) and a *RetryError
// (a failed run whose lock waits for its retry), so a server that uses
// both middlewares sets the two Config fields once, as above.
//
// A waiting task holds one of its asynq server's Concurrency slots: if
// gated tasks fill every slot, tasks no rule matches wait for a slot too.
// Short AcquireTimeouts (the task goes back to the queue and frees its
// slot), a separate queue or server for gated tasks, or a Concurrency
// above the rules' limits keep ungated work flowing.
//
// The handler runs under the leases (limiter.Lease.Run): they are kept
// alive while it runs and released, in reverse order, when it returns or
// panics, whatever it returns, even when asynq has given up on it at a
// deadline or shutdown. If a lease is lost, the handler's context is
// cancelled with cause limiter.ErrLeaseLost and the loss is counted and
// logged; the task still returns what the handler returns.
// limiter.LeaseFrom(ctx) gives the handler its (last) lease, e.g. for its
// fencing token.
//
// Each run of a task has its own lease ids: queue:taskID:retryCount:random
// (asynq task ids are unique per queue only). A handler that outlives its
// deadline and asynq's retry of the task are two runs with a permit each,
// never one shared; a crashed worker's permit comes back at the rule's
// TTL, not at the task's timeout. Nothing is kept per key between tasks,
// and the Collector labels its series by rule, never by key.
package asynqmw
