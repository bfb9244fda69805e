package quorum

import (
	"context"

	"github.com/redsem/redsem/limiter/internal/redisstore"
	"github.com/redsem/redsem/limiter/internal/store"
)

// Resume hands the lease over on every node that holds it with the
// ticket's token; it needs a quorum, and the quorum's token is agreed as
// an acquisition's is.
func (q *Store) Resume(ctx context.Context, k store.Keyspace, r store.ResumeRequest) (store.AcquireReply, error) {
	quorum := q.quorum(k)
	r.Proposed = q.proposal()
	replies := make([]store.AcquireReply, len(q.nodes))
	errs := make([]error, len(q.nodes))
	var granted []int
	failed := 0
	gather(ctx, q, nil, func(ctx context.Context, _ int, n *redisstore.Store) (store.AcquireReply, error) {
		return n.Resume(ctx, k, r)
	}, func(a nodeAnswer[store.AcquireReply]) bool {
		replies[a.i], errs[a.i] = a.v, a.err
		switch {
		case a.err != nil:
			failed++
		case a.v.Granted:
			granted = append(granted, a.i)
		}
		return false
	}, nil)
	switch {
	case len(granted)+failed < quorum:
		return store.AcquireReply{}, nil // not held
	case len(granted) < quorum:
		return store.AcquireReply{}, q.error(quorum, "resume", len(granted), nil, errs)
	}
	tok, on := q.agree(k, r.ID, replies, granted)
	if len(on) < quorum {
		return store.AcquireReply{}, q.error(quorum, "resume", len(on), nil, errs)
	}
	return store.AcquireReply{Granted: true, Token: tok, Weight: replies[granted[0]].Weight}, nil
}
