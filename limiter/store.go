package limiter

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// store is where leases live: one Redis deployment (a node, a Sentinel
// group or a Cluster) or a quorum of independent nodes. Semaphore, Mutex and
// Lease talk only to this interface, and every implementation runs the same
// Lua scripts, so there is one lease algorithm.
type store interface {
	// acquire runs acquire.lua once. err is a failure to get an answer;
	// a full semaphore is a reply with granted == false.
	acquire(ctx context.Context, k keyspace, r acquireRequest) (acquireReply, error)
	// refresh extends many leases (of any names) in as few round trips as
	// the store can; replies are in the order of reqs.
	refresh(ctx context.Context, reqs []refreshRequest) []refreshReply
	// release removes a lease and wakes waiters of other processes (those
	// whose hub is not origin); it reports the permits freed, 0 when the
	// lease was not held.
	release(ctx context.Context, k keyspace, id, token, origin string) (int64, error)
	holders(ctx context.Context, k keyspace) ([]Holder, error)
	// subscribe opens a subscription to a wake channel; it returns once
	// Redis confirmed it.
	subscribe(ctx context.Context, channel string) (subscription, error)
	// identity is what process-wide state (the refresher, the wake hub) is
	// shared by: two stores over the same clients share it.
	identity() any
}

// subscription delivers wake messages; the payload is the permits freed.
type subscription interface {
	messages() <-chan *redis.Message
	close()
}

type acquireRequest struct {
	limit    int64
	weight   int64
	ttl      time.Duration
	id       string
	idGiven  bool
	proposed string // fencing token a quorum proposes; "" = server clock
}

type acquireReply struct {
	granted bool
	token   string
	weight  int64
	free    int64         // when granted: permits still free after it
	existed bool          // when granted: the id already held this lease
	retryIn time.Duration // when not granted: until the earliest expiry
	inUse   int64         // when not granted
}

type refreshRequest struct {
	keys  keyspace
	id    string
	token string // "" = any incarnation of id
	ttl   time.Duration
}

type refreshReply struct {
	held   bool
	weight int64
	token  string
	err    error
}
