package store

import (
	"context"
	"time"
)

// Whys is implemented by a Store that can read, in one call, what decides
// when a semaphore's waiters are served (one Redis deployment; a quorum's
// nodes each hold their own view, which no one call can reconcile).
type Whys interface {
	// WhyState reads k's holders, queue, pause, fleet limit and the
	// restart quarantine left of each waiter, by the one its Client
	// applies, and of a new request, by quarantine; the queue up to wait
	// (whatever max), or its first max waiters when wait is "".
	WhyState(ctx context.Context, k Keyspace, max int, wait string, quarantine time.Duration) (WhyState, error)
}

// WhyState is a semaphore's state at one instant on the server's clock.
type WhyState struct {
	Now        int64         // server time, µs
	PauseEnd   int64         // µs (server clock) until which it grants nothing; 0: not paused
	Quarantine time.Duration // until a new request's restart quarantine ends (0: none)
	FleetLimit int64         // SetLimit's (0: none)
	Limit      int64         // the limit of the last grant (0: unknown)
	Holders    []WhyHolder
	Waiters    []Waiter // in queue order
}

// WhyHolder is a live lease: its weight, its fencing token (at least the
// server's clock in µs when it was granted or handed over) and the time
// until it expires unless refreshed.
type WhyHolder struct {
	Weight int64
	Token  int64
	TTL    time.Duration
}
