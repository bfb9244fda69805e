package quorum

import (
	"context"

	"github.com/redsem/redsem/limiter/internal/redisstore"
	"github.com/redsem/redsem/limiter/internal/store"
)

// tally is what the nodes answered for one refresh batch.
type tally struct {
	heldOn [][]int   // per lease, the nodes that kept it
	goneOn [][]int   // per lease, the nodes that answered it is not there
	errs   [][]error // per lease, per node
	waits  []int64   // per waiter, the most hopeful answer
}

func newTally(b store.RefreshBatch, nodes int) *tally {
	t := &tally{heldOn: make([][]int, len(b.Leases)), goneOn: make([][]int, len(b.Leases)),
		errs: make([][]error, len(b.Leases)), waits: make([]int64, len(b.Waits))}
	for j := range t.errs {
		t.errs[j] = make([]error, nodes)
	}
	return t
}

// count adds node i's answer res.
func (t *tally) count(i int, res store.RefreshResult) {
	for j := range t.heldOn {
		switch {
		case res.Err != nil:
			t.errs[j][i] = res.Err
		case j < len(res.Held) && res.Held[j]:
			t.heldOn[j] = append(t.heldOn[j], i)
		default:
			t.goneOn[j] = append(t.goneOn[j], i)
		}
	}
	for j := range t.waits {
		if res.Err == nil && j < len(res.Waits) {
			t.waits[j] = max(t.waits[j], res.Waits[j])
		}
	}
}

// Refresh asks every node to keep the batches alive: a lease is held while
// a quorum kept it, lost once too many nodes lack it, and a failure
// otherwise.
func (q *Store) Refresh(ctx context.Context, batches []store.RefreshBatch) []store.RefreshResult {
	tallies := make([]*tally, len(batches))
	for b, batch := range batches {
		tallies[b] = newTally(batch, len(q.nodes))
	}
	answered := 0
	gather(ctx, q, nil, func(ctx context.Context, _ int, node *redisstore.Store) ([]store.RefreshResult, error) {
		res := node.Refresh(ctx, batches)
		for _, r := range res {
			if r.Err == nil {
				return res, nil
			}
		}
		// Every batch failed: the node's failure (a down node is marked).
		return res, res[0].Err
	}, func(a nodeAnswer[[]store.RefreshResult]) bool {
		for b, t := range tallies {
			res := store.RefreshResult{Err: a.err}
			if a.err == nil {
				res = a.v[b]
			}
			t.count(a.i, res)
		}
		answered++
		return answered == len(q.nodes)
	}, nil)
	out := make([]store.RefreshResult, len(batches))
	for b, batch := range batches {
		out[b] = q.settle(batch, tallies[b])
	}
	return out
}

// settle decides each lease of a batch from its tally. A lease a quorum
// holds is granted again where it was lost (regain); one a quorum can no
// longer hold is given back by the nodes that just extended it (a
// regain's, say), which would keep it for nobody until the TTL.
func (q *Store) settle(batch store.RefreshBatch, t *tally) store.RefreshResult {
	n, quorum := len(q.nodes), q.quorum(batch.Keys)
	res := store.RefreshResult{Waits: t.waits}
	for j, it := range batch.Leases {
		switch {
		case len(t.heldOn[j]) >= quorum:
			res.Held = append(res.Held, true)
			if len(t.goneOn[j]) > 0 {
				q.regain(batch.Keys, it, t.goneOn[j])
			}
		case len(t.goneOn[j]) > n-quorum:
			res.Held = append(res.Held, false)
			if len(t.heldOn[j]) > 0 {
				keep := map[int]string{}
				for _, i := range t.heldOn[j] {
					keep[i] = it.Token
				}
				q.cfg.Spawn(func() { q.releaseOn(batch.Keys, it.ID, keep) })
			}
		default:
			res.Err = q.error(quorum, "refresh", len(t.heldOn[j]), nil, t.errs[j])
		}
	}
	if res.Err != nil {
		res.Held = nil
	}
	return res
}

// regain grants a lease that a quorum still holds again on the nodes that
// lost it (one restarted empty, or one whose write-back failed), as a
// fresh acquisition there: within the node's limit and restart
// quarantine, and under the lease's own token. Without it each node
// failure used up the lease's fault tolerance for the rest of its life,
// and a rolling restart of the nodes lost every long-held lease. Only a
// lease a quorum confirmed is regained: one a quorum lost (released,
// handed over, expired) is over. A node that refuses (full, in
// quarantine, or holding the id under another token: a newer lease of the
// same id, never to be touched) or fails is tried again at a later
// refresh.
//
// It runs in the background, one at a time per lease, so that a slow node
// holds up neither the refresh nor the other leases. The holder may
// release the lease, or hand it over, meanwhile: both mark the lease
// before they touch Redis, so a grant that landed after their script on a
// node is seen here, and given back by its token.
func (q *Store) regain(k store.Keyspace, it store.RefreshItem, nodes []int) {
	key := k.ID() + " " + it.ID
	if _, busy := q.regaining.LoadOrStore(key, struct{}{}); busy {
		return
	}
	q.cfg.Spawn(func() {
		defer q.regaining.Delete(key)
		r := store.AcquireRequest{Limit: k.Limit, Weight: it.Weight, TTL: it.TTL, ID: it.ID, IDGiven: true,
			Proposed: it.Token, ExactToken: true, Owner: it.Owner, Quarantine: it.Quarantine}
		// What may hold the lease now: the grants, and the nodes whose
		// answer failed (the script may still run there).
		maybe := map[int]string{}
		gather(context.Background(), q, nodes, func(ctx context.Context, _ int, n *redisstore.Store) (store.AcquireReply, error) {
			return n.Acquire(ctx, k, r)
		}, func(a nodeAnswer[store.AcquireReply]) bool {
			if (a.err != nil && reached(a.err)) || (a.v.Granted && !a.v.Existed) {
				maybe[a.i] = it.Token
			}
			return false
		}, nil)
		if it.GivenUp() {
			q.releaseOn(k, it.ID, maybe)
		}
	})
}
