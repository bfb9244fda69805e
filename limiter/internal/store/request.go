package store

import (
	"fmt"
	"time"
)

// QueueTTL is how long a queue entry lives unless its Client keeps it
// alive: a dead process's waiters leave the queue within it.
const QueueTTL = 3 * time.Second

// AcquireRequest is one attempt to take permits.
type AcquireRequest struct {
	Limit   int64
	Weight  int64
	TTL     time.Duration
	ID      string
	IDGiven bool
	// IDPrefix starts a made-up ID (not IDGiven): each attempt that takes
	// a new id keeps it.
	IDPrefix string
	// Proposed is the fencing token a quorum proposes; "" = server clock.
	Proposed string
	Owner    string // the Client asking
	// ReclaimAbove: the owner has no live Lease of ID, and may take back
	// its lease of ID with a token above this ("": may not reclaim).
	ReclaimAbove string
	Wait         string // queue entry to create or keep; "" = never queue
	// DirectGrant: a release may grant the queued waiter its lease
	// directly (under the lease id, which must then be the wait id).
	DirectGrant bool
	Channel     string // the owner's wake channel
	// Quarantine: how long after it started a server grants nothing on a
	// name it has no state for (0: no quarantine).
	Quarantine time.Duration
	// ExactToken: Proposed is the token of a lease a quorum holds, to be
	// taken as is (a quorum's regain).
	ExactToken bool
	// Replicas: WAIT for them after the script (WaitReplicas).
	Replicas ReplicaWait
	// Learn: the limit is learned between Learn.Min and Limit, from
	// Learn.Start (zero: a fixed limit; a quorum's nodes ignore it).
	Learn Learn
}

// AcquireReply answers an AcquireRequest or a ResumeRequest.
type AcquireReply struct {
	// FleetLimit is the fleet-wide limit when the weight is above it.
	FleetLimit int64
	Granted    bool
	Token      string
	Weight     int64
	Free       int64         // when granted: permits still free after it
	Existed    bool          // when granted: the owner's lease of this id, extended
	Woken      []string      // the caller's own waiters to wake
	RetryIn    time.Duration // when not granted: until the earliest expiry
	InUse      int64         // when not granted
	Head       bool          // when not granted: nobody waits ahead
	LastToken  string        // when not granted: the last token issued
	Restarted  bool          // when not granted: for the restart quarantine
	Paused     bool          // when not granted: for the name's pause (RetryIn: until its end)
	// Limit: when not granted, the limit applied: the fleet limit (set or
	// learned) when there is one, else the request's; 0 from a quorum,
	// whose nodes apply the request's.
	Limit      int64
	Quarantine time.Duration // when Restarted: until the quarantine ends (the latest node's, on a quorum)
	// Split: when not granted, contenders split a quorum's nodes and gave
	// their parts back; SplitPause is the pause the quorum proposes
	// before trying again (0: at once).
	Split      bool
	SplitPause time.Duration
	// HeldWeight is the weight of the lease the id holds when it differs
	// from the request's (then nothing was granted).
	HeldWeight int64
	// Acked is how many replicas confirmed the script's writes, when the
	// request asked for replicas; WaitErr is WAIT's own failure, or a
	// *FewReplicas when WAIT fell short of a master with fewer replicas.
	Acked   int
	WaitErr error
}

// RefreshBatch is what one Client keeps alive of one semaphore.
type RefreshBatch struct {
	Keys   Keyspace
	Leases []RefreshItem
	Waits  []string // queue entries to keep
	// Replicas is the strictest WaitReplicas of its leases.
	Replicas ReplicaWait
}

// RefreshItem is one lease to keep alive.
type RefreshItem struct {
	ID    string
	Token string
	TTL   time.Duration
	// What a quorum needs to grant the lease again on a node that lost it
	// (regain), and whether its holder gave it up since.
	Weight     int64
	Owner      string
	Quarantine time.Duration
	GivenUp    func() bool
}

// RefreshResult answers one batch: per lease, held or not; per waiter,
// WaiterGone, WaiterQueued, WaiterFits, or, below 0, WaiterHead.
type RefreshResult struct {
	Held  []bool
	Waits []int64
	Err   error
	// Acked and WaitErr answer the batch's replicas, as in AcquireReply.
	Acked   int
	WaitErr error
}

// What a refresh says of a queued waiter.
const (
	WaiterGone   = 0
	WaiterQueued = 1
	WaiterFits   = 2 // its permits are free: it should try now
)

// WaiterHead reads a refresh's answer for a waiter at the head of its
// queue that does not fit yet (-1 - ms): its timer is to try in the
// returned time, the earliest expiry (or the pause's end).
func WaiterHead(code int64) (in time.Duration, ok bool) {
	if code >= 0 {
		return 0, false
	}
	return time.Duration(-1-code) * time.Millisecond, true
}

// ReleaseRequest removes one lease.
type ReleaseRequest struct {
	ID, Token string // Token "" = any
	Channel   string // the releasing Client's wake channel
	Wake      bool
	// Check asks Redis whether the lease had expired; a Lease released
	// within its local deadline knows it had not.
	Check bool
}

// ReleaseReply answers a ReleaseRequest.
type ReleaseReply struct {
	Freed int64 // 0 when the lease was not held
	Woken []string
}

// ResumeRequest hands a held lease over to Owner ("" parks it).
type ResumeRequest struct {
	ID, Token, Owner, Proposed string
	TTL                        time.Duration
	Replicas                   ReplicaWait
}

// Holder is one live lease, as the store sees it.
type Holder struct {
	ID     string
	Weight int64
	Token  int64
	TTL    time.Duration
}

// Waiter is one queued request, as the store sees it.
type Waiter struct {
	ID     string
	Weight int64
	TTL    time.Duration
	Limit  int64 // its Semaphore's own limit
	// Quarantine: until its own restart quarantine ends (0: none; read by
	// WhyState only).
	Quarantine time.Duration
}

// ReplicaWait is what WaitReplicas asks for: WAIT N Timeout after each
// script that grants or extends a lease.
type ReplicaWait struct {
	N       int
	Timeout time.Duration
}

// On reports whether anything is asked.
func (w ReplicaWait) On() bool { return w.N > 0 }

// Stricter is the wait that satisfies both w and o: one WAIT serves every
// lease of a refresh batch.
func (w ReplicaWait) Stricter(o ReplicaWait) ReplicaWait {
	return ReplicaWait{N: max(w.N, o.N), Timeout: max(w.Timeout, o.Timeout)}
}

// FewReplicas is the WaitErr of a WAIT that fell short because the
// master had fewer connected replicas than asked (a promoted replica has
// none until another syncs from it): no timeout could have been met.
type FewReplicas struct {
	Addr      string // the master
	Connected int    // its connected replicas (INFO replication)
}

func (e *FewReplicas) Error() string {
	return fmt.Sprintf("master %s has %d connected replica(s)", e.Addr, e.Connected)
}
