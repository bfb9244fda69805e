package quorum

import (
	"context"

	"github.com/redsem/redsem/limiter/internal/redisstore"
	"github.com/redsem/redsem/limiter/internal/store"
)

// Release returns once a quorum answered; the other nodes finish (or let
// the lease expire) in the background.
func (q *Store) Release(ctx context.Context, k store.Keyspace, r store.ReleaseRequest) (store.ReleaseReply, error) {
	quorum := q.quorum(k)
	errs := make([]error, len(q.nodes))
	var rep store.ReleaseReply
	answered, failed := 0, 0
	gather(ctx, q, nil, func(ctx context.Context, _ int, n *redisstore.Store) (store.ReleaseReply, error) {
		return n.Release(ctx, k, r)
	}, func(a nodeAnswer[store.ReleaseReply]) bool {
		errs[a.i] = a.err
		if a.err != nil {
			failed++
		} else {
			answered++
			rep.Freed = max(rep.Freed, a.v.Freed)
			rep.Woken = union(rep.Woken, a.v.Woken)
		}
		return answered >= quorum || failed > len(q.nodes)-quorum
	}, nil)
	if rep.Freed > 0 || answered >= quorum {
		return rep, nil
	}
	return rep, q.error(quorum, "release", answered, nil, errs)
}

// releaseOn removes this process's own attempt from the nodes given as
// node -> token ("" = any), waking nobody: a failed attempt freed nothing
// anyone waited for, and a wake-up would make waiters retry in a loop. It
// waits for the nodes that answer and leaves the silent ones to finish in
// the background; a node marked down gets it once it is back (deferUndo).
func (q *Store) releaseOn(k store.Keyspace, id string, tokens map[int]string) {
	if len(tokens) == 0 {
		return
	}
	nodes := make([]int, 0, len(tokens))
	for i, tok := range tokens {
		if q.skip(i) != nil {
			q.deferUndo(i, func() { q.releaseOn(k, id, map[int]string{i: tok}) })
			continue
		}
		nodes = append(nodes, i)
	}
	if len(nodes) == 0 {
		return
	}
	pending := len(nodes)
	gather(context.Background(), q, nodes, func(ctx context.Context, i int, n *redisstore.Store) (store.ReleaseReply, error) {
		return n.Release(ctx, k, store.ReleaseRequest{ID: id, Token: tokens[i]})
	}, func(a nodeAnswer[store.ReleaseReply]) bool {
		if a.err == nil {
			pending--
		}
		return pending == 0
	}, nil)
}
