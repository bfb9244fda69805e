package limiter

import (
	"context"
	"time"
)

// store is where leases live: one Redis deployment (a node, a Sentinel
// group or a Cluster) or a quorum of independent nodes. Semaphore, Lease,
// the refresher and the hub talk only to this interface, and every
// implementation runs the same Lua scripts, so there is one lease
// algorithm.
type store interface {
	// acquire runs acquire.lua once. err is a failure to get an answer;
	// a full semaphore is a reply with granted == false.
	acquire(ctx context.Context, k keyspace, r acquireRequest) (acquireReply, error)
	// refresh keeps alive, per semaphore, the leases and queued waiters of
	// one Client in one script call; replies are in the order of batches.
	refresh(ctx context.Context, batches []refreshBatch) []refreshResult
	// release removes a lease; with wake, it wakes the waiters that now
	// fit (those of other Clients by pub/sub; this Client's are returned).
	release(ctx context.Context, k keyspace, r releaseRequest) (releaseReply, error)
	// resume hands a held lease over to r.owner with a new token.
	resume(ctx context.Context, k keyspace, r resumeRequest) (acquireReply, error)
	// leave takes a waiter out of the queue and passes its turn on.
	leave(ctx context.Context, k keyspace, wait, own string) ([]string, error)
	holders(ctx context.Context, k keyspace) ([]Holder, error)
	// waiters lists the live queued waiters in order, at most max.
	waiters(ctx context.Context, k keyspace, max int) ([]Waiter, error)
	// setLimit stores (n > 0) or clears (n == 0) the fleet-wide limit and
	// returns the own waiters it woke; fleetLimit reads it (0: none).
	setLimit(ctx context.Context, k keyspace, n int64, own string, ttl time.Duration) ([]string, error)
	fleetLimit(ctx context.Context, k keyspace) (int64, error)
	// evicting describes the nodes whose maxmemory policy may evict keys
	// ("" for none).
	evicting(ctx context.Context, checked *nodeSet) (string, error)
	// names lists the semaphores whose state key matches the pattern.
	names(ctx context.Context, pattern string) ([]string, error)
	// canWait reports (an *ArgumentError) whether WaitReplicas w can be
	// kept here.
	canWait(w replicaWait) error
	// handsOver reports whether releases grant queued waiters their leases
	// (acquireRequest.handoff); a quorum's nodes only wake them.
	handsOver() bool
	// boundedByCtx reports whether every call returns by its ctx's
	// deadline without help: a go-redis client with ContextTimeoutEnabled
	// puts the deadline on the socket; a quorum asks its nodes in
	// goroutines it stops waiting for.
	boundedByCtx() bool
	// listen receives the messages of channel until ctx ends, reconnecting
	// as needed; subscribed reports every (re)subscription or failure to.
	listen(ctx context.Context, channel string, deliver func(payload string), subscribed func(error))
}

type acquireRequest struct {
	limit    int64
	weight   int64
	ttl      time.Duration
	id       string
	idGiven  bool
	proposed string // fencing token a quorum proposes; "" = server clock
	owner    string // the Client asking
	// reclaimAbove: the owner has no live Lease of id, and may take back
	// its lease of id with a token above this ("": may not reclaim).
	reclaimAbove string
	wait         string // queue entry to create or keep; "" = never queue
	// handoff: a release may grant the queued waiter its lease directly
	// (under the lease id, which must then be the wait id).
	handoff bool
	channel string // the owner's wake channel
	// quarantine: how long after it started a server grants nothing on
	// a name it has no state for (0: no quarantine); see RestartQuarantine.
	quarantine time.Duration
	// exactToken: proposed is the token of a lease a quorum holds, to be
	// taken as is (quorumStore.regain).
	exactToken bool
	// replicas: WAIT for them after the script (WaitReplicas).
	replicas replicaWait
}

type acquireReply struct {
	// fleetLimit is the fleet-wide limit when the weight is above it.
	fleetLimit int64
	granted    bool
	token      string
	weight     int64
	free       int64         // when granted: permits still free after it
	existed    bool          // when granted: the owner's lease of this id, extended
	woken      []string      // this Client's waiters to wake
	retryIn    time.Duration // when not granted: until the earliest expiry
	inUse      int64         // when not granted
	head       bool          // when not granted: nobody waits ahead
	lastToken  string        // when not granted: the last token issued
	restarted  bool          // when not granted: for the restart quarantine (retryIn is its end)
	// heldWeight is the weight of the lease the id holds when it differs
	// from the request's (then nothing was granted).
	heldWeight int64
	// acked is how many replicas confirmed the script's writes, when the
	// request asked for replicas; waitErr is WAIT's own failure.
	acked   int
	waitErr error
}

type refreshBatch struct {
	keys   keyspace
	leases []refreshItem
	waits  []string // queue entries to keep
	// replicas is the strictest WaitReplicas of its leases.
	replicas replicaWait
}

type refreshItem struct {
	id    string
	token string
	ttl   time.Duration
	// What a quorum needs to grant the lease again on a node that lost
	// it (see quorumStore.regain), and whether its holder gave it up since.
	weight     int64
	owner      string
	quarantine time.Duration
	givenUp    func() bool
}

// refreshResult answers one batch: per lease, held or not; per waiter,
// waiterGone, waiterQueued or waiterFits.
type refreshResult struct {
	held  []bool
	waits []int64
	err   error
	// acked and waitErr answer the batch's replicas, as in acquireReply.
	acked   int
	waitErr error
}

const (
	waiterGone   = 0
	waiterQueued = 1
	waiterFits   = 2 // its permits are free: it should try now
)

type releaseRequest struct {
	id, token string
	own       string // the releasing Client's wake channel
	wake      bool
	// check asks Redis whether the lease had expired; a Lease released
	// within its local deadline knows it had not.
	check bool
}

type releaseReply struct {
	freed int64 // 0 when the lease was not held
	woken []string
}

type resumeRequest struct {
	id, token, owner, proposed string
	ttl                        time.Duration
	replicas                   replicaWait
}
