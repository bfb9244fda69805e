package limiter

// Reason is why a request waits, as BusyError.Reason reports it
// and package inspect's Why and Waiters say it.
type Reason string

const (
	// ReasonNone: nothing holds the request back; its next attempt (or a
	// release's direct grant, on its way) is granted.
	ReasonNone Reason = ""
	// ReasonFull: the limit is full: the permits in use and those of the
	// waiters ahead leave no room for it.
	ReasonFull Reason = "full"
	// ReasonFleetLimit: a fleet limit, set (SetLimit) or learned
	// (Adaptive), below its Semaphore's own limit keeps it out; under its
	// own limit it would be granted.
	ReasonFleetLimit Reason = "fleet-limit"
	// ReasonPaused: the name is paused (Pause) until its end.
	ReasonPaused Reason = "paused"
	// ReasonQuarantine: Redis restarted and grants nothing on the name
	// until the restart quarantine ends: the waiter's own, its Client's
	// RestartQuarantine (a new request's: the asking Client's).
	ReasonQuarantine Reason = "quarantine"
	// ReasonRate: the name's rate has no slot before its next one.
	ReasonRate Reason = "rate"
)
