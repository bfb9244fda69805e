// Package asynqmw caps how many asynq task handlers run at once across
// every worker process, with semaphores from package limiter.
//
//	mw, err := asynqmw.New(rdb, []asynqmw.Rule{
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
// before its deadline.
//
// A handler that outlives its context (asynq gave up on it at a deadline
// or shutdown, and may run the task again under the same lease id) does
// not release on return: its lease lapses after its TTL, so the new run's
// permit is never taken from it.
//
// The lease id is the asynq task id, so a task retried after a worker
// crashed takes back its own permit, not a second one. The lease is kept
// alive while the handler runs; if it is lost, the handler's context is
// cancelled with cause limiter.ErrLeaseLost.
package asynqmw
