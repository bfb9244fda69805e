// Package asynqmw caps how many asynq task handlers run at once, and how
// often they start, across every worker process, with semaphores and rate
// limits from package limiter.
//
//	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}) // shared by everything below
//	lc, err := limiter.New(rdb) // one per process; Close it after the server shut down
//	defer lc.Close(ctx)
//	mw, err := asynqmw.New(lc, []asynqmw.Rule{
//		// every matching rule applies, narrowest first
//		{Name: "partner-customer", TypePrefix: "partner:", Key: customerOf, Limit: 1},
//		{Name: "partner-api", TypePrefix: "partner:", Limit: 5, AcquireTimeout: 5 * time.Second,
//			Rate: limiter.Rate{Events: 10, Per: time.Second, Burst: 5}}, // and 10 starts a second
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
// waits for each — woken by releases, not by polling — up to its rule's
// AcquireTimeout, ending a little before the task's deadline if that
// comes first. Then it gives back what it took and returns a *BusyError
// (errors.Is(err, limiter.ErrBusy)): with IsFailure and RetryDelay in the
// server's Config, asynq re-queues it without spending its retry budget;
// MaxGated caps how long a task may be re-queued so, across runs. A task
// with no retry budget left (asynq archives such a task whatever it
// returns) waits up to LastTryAcquireTimeout (default 1 minute) instead.
// A task that finds its name paused or its Redis in its restart
// quarantine (a Rule's TTL, 3s by default) and cannot wait for the end
// is re-queued once, for the end; a Redis failure re-queues it after
// about a second (it did not run: a Redis starting or failing over is no
// reason to spend a retry). A wait that the task's context or the
// limiter Client's Close ends returns that error, and asynq retries the
// task as for any error. A *BusyError says why the task could not go
// (Reason: full, fleet-limit, key-limit, paused, quarantine, rate) and
// when it should (ETA), and each such re-queue is logged at Debug
// ("asynqmw: busy, re-queued", with reason, eta and retry_in).
//
// # Rates
//
// A rule with a Rate also limits how often its handlers start, fleet-wide
// (limiter.RateLimit: each start reserves its time in Redis, GCRA; a Key
// rule has one rate per key). A task takes its permits first, then its
// rate slots:
//
//  1. It takes its permits, as above.
//  2. Holding them, it reserves a slot of every rate of its rules, no
//     further off than the time the rate takes to serve one more task
//     than the largest limit among its rules (at most 1s), and sleeps
//     until the latest. Then it starts.
//  3. A slot further off (a pause, or a rate that serves other rules'
//     tasks too) is not waited for holding permits: the task gives them
//     back, reserves the slot (bounded by the rule's AcquireTimeout: a
//     slot further off returns a *BusyError with Rate set whose RetryIn is
//     the slot's wait), sleeps until it holding nothing, and goes back to 1.
//
// Why this order: a slot goes to a task that holds its permits, so none
// is lost to permits that come late, and rate and concurrency are both
// used when both bind (a rule of Limit 5 and 18/s against calls of
// 250ms runs 18 a second). A permit waits for a near slot only: as long
// as the rate needs to serve its holders anyway. Reserving keeps the
// rate's first-come, first-served order, with one call to Redis and no
// polling.
//
// A far slot whose permits came late is not used late: an event delayed
// past its slot would bunch with the ones after it and break the rate
// (ten slots 100ms apart whose permits all free at once would start
// together). A handler that would start more than limiter.Lateness (20ms)
// after its slot takes an event now instead, when the rate has room (one
// more call: limiter.Reservation.Renew); when it has none, a near slot
// as in 2. So in any window of length w a rule's handlers start at most
// Burst + Events*(w + 20ms)/Per times.
//
// # Pauses
//
// A handler that hears "slow down" (a 429 with Retry-After) returns
// Pause(d, err) (or a *PauseError naming one rule): the middleware pauses
// the task's rules, in Redis (inspect.Inspector.Pause), whether they have
// a Rate, a Limit or both, so that no worker's task of them gets a slot
// or a new permit before the pause ends (waiting tasks are served in
// order from then), and the task is re-queued at the pause's end without
// spending a retry, as BullMQ's RateLimitError. A task whose wait runs
// out during a pause set elsewhere is re-queued for the pause's end too
// (a *BusyError with Paused set).
//
// IsFailure and RetryDelay are the one way this module's asynq
// middlewares talk to asynq's retries: scheduler.Adopt returns the same
// *BusyError (an earlier run still holds the job's lock) and a *RetryError
// (a failed run whose lock waits for its retry), so a server that uses
// both middlewares sets the two Config fields once, as above.
//
// A waiting task holds one of its asynq server's Concurrency slots: if
// gated tasks fill every slot, tasks no rule matches wait for a slot too.
// asynq hands tasks out in queue order, so when one customer has most of
// the backlog, handlers holding its tasks would wait on its full key
// while other customers' tasks wait in the queue. With Park, such a task
// (its key full, the rest of its rules with room) leaves its slot at
// once and is put back in its queue by the key's next release: the
// slots go to tasks that can run, and the key's tasks come back one per
// release rather than bounce. Short AcquireTimeouts, a separate queue or
// server for gated tasks, or a Concurrency above the rules' limits keep
// ungated work flowing.
//
// The handler runs under the leases (limiter.Lease.Run): they are kept
// alive while it runs and released, in reverse order, when it returns or
// panics, whatever it returns, even when asynq has given up on it at a
// deadline or shutdown. If a lease is lost, the handler's context is
// cancelled with cause limiter.ErrLeaseLost and the loss is counted and
// logged; the task returns what the handler returns, but a failure the
// loss caused (the handler returned its context's end), or a permit lost
// while the task waited for its next one (a Redis restarted empty
// forgets them), is the fleet's, not the task's: a *BusyError that
// re-queues it after about the rule's TTL, within MaxGated.
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
