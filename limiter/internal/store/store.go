package store

import (
	"context"
	"errors"
	"time"
)

// Store is where leases live. limiter's Semaphore, Lease, keep-alive and
// wake-ups talk only to this interface.
type Store interface {
	// Acquire runs the acquire script once. err is a failure to get an
	// answer; a full semaphore is a reply with Granted false.
	Acquire(ctx context.Context, k Keyspace, r AcquireRequest) (AcquireReply, error)
	// Refresh keeps alive, per semaphore, the leases and queued waiters of
	// one Client in one script call; replies are in the order of batches.
	Refresh(ctx context.Context, batches []RefreshBatch) []RefreshResult
	// Release removes a lease; with Wake, it wakes the waiters that now
	// fit (those of other Clients by pub/sub; the caller's are returned).
	Release(ctx context.Context, k Keyspace, r ReleaseRequest) (ReleaseReply, error)
	// Resume hands a held lease over to r.Owner with a new token.
	Resume(ctx context.Context, k Keyspace, r ResumeRequest) (AcquireReply, error)
	// Leave takes a waiter out of the queue and passes its turn on; it
	// returns the caller's own waiters it woke.
	Leave(ctx context.Context, k Keyspace, wait, channel string) ([]string, error)
	// Holders lists the live leases.
	Holders(ctx context.Context, k Keyspace) ([]Holder, error)
	// Waiters lists the live queued waiters in order, at most max.
	Waiters(ctx context.Context, k Keyspace, max int) ([]Waiter, error)
	// SetLimit stores (n > 0) or clears (n == 0) the fleet-wide limit and
	// returns the caller's own waiters it woke; FleetLimit reads it (0:
	// none).
	SetLimit(ctx context.Context, k Keyspace, n int64, channel string, ttl time.Duration) ([]string, error)
	FleetLimit(ctx context.Context, k Keyspace) (int64, error)
	// Evicting describes the nodes whose maxmemory policy may evict keys
	// ("" for none), asking only those not in checked and adding to it
	// those that answered without.
	Evicting(ctx context.Context, checked *NodeSet) (string, error)
	// Names lists the names whose state key matches pattern (StatePattern).
	Names(ctx context.Context, pattern string) ([]string, error)
	// CanWait says why WaitReplicas w cannot be kept here (nil: it can).
	CanWait(w ReplicaWait) error
	// GrantsDirectly reports whether releases grant queued waiters their
	// leases (AcquireRequest.DirectGrant); a quorum's nodes only wake them.
	GrantsDirectly() bool
	// BoundedByCtx reports whether every call returns by its ctx's
	// deadline without help: a go-redis client with ContextTimeoutEnabled
	// puts the deadline on the socket; a quorum asks its nodes in
	// goroutines it stops waiting for.
	BoundedByCtx() bool
	// Listen receives the messages of channels until ctx ends,
	// reconnecting as needed; subscribed reports every (re)subscription,
	// or failure to.
	Listen(ctx context.Context, channels []string, deliver func(channel, payload string), subscribed func(error))
	// ShardWakes returns the shard channel subscriber of a Cluster or a
	// Ring, whose wake-ups stay in each name's shard (SSUBSCRIBE, Redis
	// 7), or nil where they go by Listen. It delivers every message until ctx ends,
	// and calls resubscribed when a channel is subscribed again after a
	// loss, since a wake-up published meanwhile was missed. spawn runs
	// the goroutines it needs.
	ShardWakes(ctx context.Context, spawn func(func()), deliver func(payload string), resubscribed func()) ShardWakes
}

// ShardWakes subscribes shard channels (Keyspace.WakeChannel), each on
// the master of its slot (or Ring shard): one connection per master,
// whatever the number of names. It follows slots that move (a failover, a migration),
// subscribing again where they went.
type ShardWakes interface {
	// Add subscribes channel, counting the callers, and returns once it
	// is subscribed, or with the error of the attempt (which is tried
	// again in the background while the channel is wanted), or when ctx
	// ends. ErrNoShardPubSub: the server refused SSUBSCRIBE (before Redis
	// 7, or an ACL), and will refuse again. Each Add, whatever it
	// returned, is undone by one Drop.
	Add(ctx context.Context, channel string) error
	// Drop undoes an Add. The channel is unsubscribed a while after its
	// last Drop, so that a name waited on again soon costs no
	// SSUBSCRIBE, and one waited on once costs no connection state for
	// ever.
	Drop(channel string)
}

// ErrNoShardPubSub says the server refused SSUBSCRIBE: wake-ups go by
// plain pub/sub instead.
var ErrNoShardPubSub = errors.New("sharded pub/sub refused")
