package scheduler

// Task headers that carry the lock from the scheduler to the worker
// (redsem-*, as asynq's tools show them): a wire format between this
// package's two sides, not an API.
const (
	headerTicket = "redsem-ticket" // limiter.Ticket in text form
	headerLimit  = "redsem-limit"  // the lock's limit (1 for a mutex)
	headerJob    = "redsem-job"    // the job's name, for metrics and logs
	headerTTL    = "redsem-ttl"    // the job's TTL (time.Duration text): the pick-up allowance, also of a retry
)
