package limiter

import "time"

// An Observer hears what a Client's semaphores and rate limits do, for
// metrics: package limiterprom has one for Prometheus. The Client calls
// it on the caller's goroutine, so its methods must be quick and must not
// block; name is the semaphore's or rate's name.
//
// Outcomes: Acquired's are "acquired", "busy" (TryAcquire found no room),
// "timeout" (AcquireTimeout ran out), "canceled" (the caller's context
// ended) and "error" (Redis failed); Rated's are "reserved" (the event was
// given its time, wait long), "busy", "canceled" (a reserved event's wait
// given up) and "error".
type Observer interface {
	Acquired(name, outcome string, waited time.Duration)
	Held(name string, delta int) // a lease began (+1) or ended (-1)
	Lost(name string)            // a lease was lost while kept alive
	RefreshFailed(name string)   // a refresh got no answer
	Rated(name, outcome string, wait time.Duration)
	Paused(name string) // this Client's Inspector set a pause
}

// Outcomes, as the Observer's doc lists them.
const (
	outcomeAcquired = "acquired"
	outcomeBusy     = "busy"
	outcomeTimeout  = "timeout"
	outcomeCanceled = "canceled"
	outcomeError    = "error"
	outcomeReserved = "reserved"
)

// noObserver is the default Observer, so the code reports unconditionally.
type noObserver struct{}

func (noObserver) Acquired(string, string, time.Duration) {}
func (noObserver) Held(string, int)                       {}
func (noObserver) Lost(string)                            {}
func (noObserver) RefreshFailed(string)                   {}
func (noObserver) Rated(string, string, time.Duration)    {}
func (noObserver) Paused(string)                          {}
