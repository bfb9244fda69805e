package quorum

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/redsem/redsem/limiter/internal/redisstore"
	"github.com/redsem/redsem/limiter/internal/store"
)

// votes is what the nodes answered one acquire attempt.
type votes struct {
	replies               []store.AcquireReply
	errs                  []error
	granted, busy, failed []int
}

func (v *votes) count(a nodeAnswer[store.AcquireReply]) {
	v.replies[a.i], v.errs[a.i] = a.v, a.err
	switch {
	case a.err != nil:
		v.failed = append(v.failed, a.i)
	case a.v.Granted:
		v.granted = append(v.granted, a.i)
	default:
		v.busy = append(v.busy, a.i)
	}
}

// Acquire asks every node, and holds the lease when a quorum granted it
// in time under one token; otherwise it gives back what the attempt was
// granted. Whatever the outcome, a node that took the waiter out of its
// queue woke those behind it: the caller's own are in the reply.
func (q *Store) Acquire(ctx context.Context, k store.Keyspace, r store.AcquireRequest) (store.AcquireReply, error) {
	start := time.Now()
	r.Proposed = q.proposal()
	v := q.vote(ctx, k, r)
	rep, err := q.decide(ctx, k, r, v, time.Since(start))
	for _, node := range v.replies {
		rep.Woken = union(rep.Woken, node.Woken)
	}
	return rep, err
}

// vote asks every node that is up to grant r, until enough nodes are full
// to rule out a quorum, or every node answered. A grant is waited for on
// every node that is up: returning at a quorum would leave a slow node's
// grant to be given back later, holding a permit there meanwhile, and a
// release that came first would not find it, so that waiters split the
// nodes again and again. A node that does not answer in NodeTimeout is
// marked down and not asked again until a probe finds it back (health).
// What a node answers after the outcome is undone in the background
// (late).
func (q *Store) vote(ctx context.Context, k store.Keyspace, r store.AcquireRequest) *votes {
	n, quorum := len(q.nodes), q.quorum(k)
	v := &votes{replies: make([]store.AcquireReply, n), errs: make([]error, n)}
	gather(ctx, q, nil, func(ctx context.Context, _ int, node *redisstore.Store) (store.AcquireReply, error) {
		return node.Acquire(ctx, k, r)
	}, func(a nodeAnswer[store.AcquireReply]) bool {
		v.count(a)
		return len(v.busy) > n-quorum
	}, func(a nodeAnswer[store.AcquireReply]) { q.late(k, r, a) })
	return v
}

// late undoes a node's answer that came after the attempt's outcome,
// whatever it was: a grant is given back by its own token, so that no
// later attempt with the same id is touched (a lease the id already held
// stays with its holder); a failure, for a random id, by any token, as
// its grant may have been made with the reply lost. Kept, a late grant of
// an attempt that won would outlive a release that came first; given
// back, it cost the slow node a permit for as long as it was slow (never
// more than its limit: each node keeps its own), and the lease's next
// refresh grants it there again (regain).
func (q *Store) late(k store.Keyspace, r store.AcquireRequest, a nodeAnswer[store.AcquireReply]) {
	switch {
	case a.err == nil && a.v.Granted && !a.v.Existed:
		q.releaseOn(k, r.ID, map[int]string{a.i: a.v.Token})
	case a.err != nil && !r.IDGiven && reached(a.err):
		q.releaseOn(k, r.ID, map[int]string{a.i: ""})
	}
}

// decide turns the votes into a grant, a full semaphore or a failure.
func (q *Store) decide(ctx context.Context, k store.Keyspace, r store.AcquireRequest, v *votes, elapsed time.Duration) (store.AcquireReply, error) {
	for _, i := range v.busy {
		if v.replies[i].HeldWeight > 0 {
			return v.replies[i], nil
		}
	}
	quorum := q.quorum(k)
	var tok string
	var on []int
	if len(v.granted) >= quorum && r.TTL-elapsed-q.cfg.Drift(r.TTL) > 0 {
		if tok, on = q.agree(k, r.ID, v.replies, v.granted); len(on) >= quorum {
			return q.won(k, r, v, tok), nil
		}
	}
	q.rollback(k, r, v, tok, on)
	switch {
	case ctx.Err() != nil:
		return store.AcquireReply{}, context.Cause(ctx)
	case len(v.failed) <= len(q.nodes)-quorum:
		// Failures alone do not rule out a quorum: the semaphore is full
		// (or we were too slow for the TTL); wait as on a single node,
		// on a timer too, since nodes do not queue in order.
		return q.full(v, elapsed), nil
	}
	return store.AcquireReply{}, q.error(quorum, "acquire", len(v.granted), v.busy, v.errs)
}

// won is the grant of a quorum that agreed on tok. The nodes that were
// full queued the waiter; a queue entry left there would take up the
// room of real waiters, so it leaves them, in the background.
func (q *Store) won(k store.Keyspace, r store.AcquireRequest, v *votes, tok string) store.AcquireReply {
	if r.Wait != "" && len(v.busy) > 0 {
		q.cfg.Spawn(func() {
			gather(context.Background(), q, v.busy, func(ctx context.Context, _ int, n *redisstore.Store) ([]string, error) {
				return n.Leave(ctx, k, r.Wait, r.Channel)
			}, func(nodeAnswer[[]string]) bool { return false }, nil)
		})
	}
	first := v.replies[v.granted[0]]
	rep := store.AcquireReply{Granted: true, Token: tok, Weight: first.Weight, Free: first.Free}
	for _, i := range v.granted {
		rep.Free = min(rep.Free, v.replies[i].Free)
	}
	return rep
}

// rollback gives back the leases the attempt created (by the token each
// node holds it under: tok on the nodes in on; a lease the id already
// held stays with its holder), and, for a random id, what a failed node
// may have granted with its reply lost.
func (q *Store) rollback(k store.Keyspace, r store.AcquireRequest, v *votes, tok string, on []int) {
	undo := map[int]string{}
	for _, i := range v.granted {
		if !v.replies[i].Existed {
			undo[i] = v.replies[i].Token
		}
	}
	for _, i := range on {
		if _, ok := undo[i]; ok {
			undo[i] = tok
		}
	}
	if !r.IDGiven {
		for _, i := range v.failed {
			if reached(v.errs[i]) {
				undo[i] = ""
			}
		}
	}
	q.releaseOn(k, r.ID, undo)
}

// full is the reply of a full semaphore: the earliest expiry any full node
// gave. When contenders split the nodes, each gave its part back,
// silently, and proposes a pause before the next try (Split): none for
// the one that was granted the first node that is up, one to three
// attempts' length for the others, so that the first likely wins next
// time rather than all splitting again. The waiter decides how far to
// trust it (limiter's waiting.retryAfter): what looks like a split may be
// a holder missing from one node, which no pause resolves.
func (q *Store) full(v *votes, elapsed time.Duration) store.AcquireReply {
	rep := store.AcquireReply{Head: true}
	for i, b := range v.busy {
		if i == 0 || v.replies[b].RetryIn < rep.RetryIn {
			rep.RetryIn = v.replies[b].RetryIn
		}
		rep.InUse = max(rep.InUse, v.replies[b].InUse)
		rep.Restarted = rep.Restarted || v.replies[b].Restarted
		rep.Quarantine = max(rep.Quarantine, v.replies[b].Quarantine)
	}
	if len(v.granted) > 0 {
		rep.Split, rep.SplitPause = true, elapsed+rand.N(2*elapsed+time.Millisecond)
		if slices.Contains(v.granted, q.firstUp()) {
			rep.SplitPause = 0
		}
	}
	return rep
}
