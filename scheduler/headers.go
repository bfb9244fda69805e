package scheduler

// Task headers that carry the lock from the scheduler to the worker.
const (
	HeaderTicket = "redsem-ticket" // limiter.Ticket in text form
	HeaderLimit  = "redsem-limit"  // the lock's limit (1 for a mutex)
	HeaderJob    = "redsem-job"    // the job's name, for metrics and logs
	HeaderTTL    = "redsem-ttl"    // the job's TTL (time.Duration text): the pick-up allowance, also of a retry
)
