// Package bridge hands package inspect what it needs of a limiter.Client
// without widening limiter's API: limiter sets Of at init, inspect calls
// it. Neither imports the other through it.
package bridge

import (
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// Client is what an Inspector uses of its limiter.Client.
type Client struct {
	Store      store.Store
	ID         string        // the Client's id, as its wake channels carry it
	Prefix     string        // the keys' prefix
	TTL        time.Duration // the Client's lease TTL (a stored limit's key lifetime)
	Quarantine time.Duration // the Client's restart quarantine
	// Channel is where releases wake this Client's waiters of the name
	// whose shard channel is shard; Wake delivers the wake-ups a script
	// returned to them.
	Channel func(shard string) string
	Wake    func(msgs []string)
	Paused  func(name string) // tells the Client's Observer of a pause
	Closed  func() error      // ErrClosed once the Client's Close began
}

// Of returns the parts of c, a *limiter.Client (set by limiter's init).
var Of func(c any) Client

// ArgError and RedisError build limiter's errors: an *ArgumentError, and a
// Redis failure wrapped with what was being done (a quorum's failure as
// its *QuorumError). CheckRate is a limiter.Rate's check: an
// *ArgumentError naming arg (and its field) when r is out of range.
var (
	ArgError   func(arg string, value any, reason string) error
	RedisError func(op, name string, err error) error
	CheckRate  func(r store.Rate, arg string) error
)
