// Package asynqmw caps how many asynq task handlers run at once across
// every worker process, with semaphores from package limiter.
//
//	lc, err := limiter.New(rdb) // one per process; Close it after the server shut down
//	defer lc.Close(ctx)
//	mw, err := asynqmw.New(lc, []asynqmw.Rule{
//		{Name: "partner-api", TypePrefix: "partner:", Limit: 5, MaxWait: 5 * time.Second},
//	})
//	mux.Use(mw)
//	srv := asynq.NewServer(opt, asynq.Config{
//		IsFailure:      asynqmw.IsFailure(nil),
//		RetryDelayFunc: asynqmw.RetryDelay(nil),
//	})
//
// A gated task waits for a permit up to its rule's MaxWait (woken by
// releases, not by polling) — ending a little before the task's deadline
// if that comes first — then returns a *BusyError: with IsFailure and
// RetryDelay in the server's Config, asynq re-queues it without spending
// its retry budget. A task with no retry budget left (asynq archives such
// a task whatever it returns) waits in its handler up to its deadline
// instead, so it is not archived for being gated unless no permit frees
// before its deadline. A wait that the task's context or the limiter
// Client's Close ends, or a Redis failure, returns that error and asynq
// retries the task as for any error.
//
// The handler runs under the lease (limiter.Lease.Run): the lease is kept
// alive while it runs and is released when it returns or panics, whatever
// it returns, even when asynq has given up on it at a deadline or
// shutdown. If the lease is lost, the handler's context is cancelled with
// cause limiter.ErrLeaseLost and the loss is counted and logged; the task
// still returns what the handler returns. limiter.LeaseFrom(ctx) gives
// the handler its lease, e.g. for its fencing token.
//
// The lease id is the asynq task id, and an id names one holder at a
// time: a new run of a task (a retry after a deadline, or after a worker
// crashed) waits for the previous run's lease to be released — or, for a
// crashed worker, to lapse at the rule's TTL, not the task's timeout —
// rather than take a second permit or share one.
package asynqmw
