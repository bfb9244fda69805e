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
// releases, not by polling), then returns a *BusyError: with IsFailure and
// RetryDelay in the server's Config, asynq re-queues it without spending
// its retry budget. A task with no retry budget left waits in its handler
// up to its deadline instead, so it is never archived just for being gated.
//
// The lease id is the asynq task id, so a task retried after a worker
// crashed takes back its own permit, not a second one. The lease is kept
// alive while the handler runs; if it is lost, the handler's context is
// cancelled with cause limiter.ErrLeaseLost.
package asynqmw
