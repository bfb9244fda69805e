package quorum

import (
	"context"
	"strconv"

	"github.com/redsem/redsem/limiter/internal/redisstore"
	"github.com/redsem/redsem/limiter/internal/store"
)

// agree makes the nodes that granted a lease (an acquire or a resume)
// hold it under one token: that of a lease the id already held (its
// holder knows that token), else the highest granted, written back where
// a node granted another (setToken). It returns that token and the nodes
// that hold the lease under it, and raises the Client's token floor when
// they are a quorum.
func (q *Store) agree(k store.Keyspace, id string, replies []store.AcquireReply, granted []int) (tok string, on []int) {
	token, differ := quorumToken(replies, granted)
	tok = strconv.FormatInt(token, 10)
	for _, i := range granted {
		if _, ok := differ[i]; !ok {
			on = append(on, i)
		}
	}
	on = append(on, q.setToken(k, id, tok, differ)...)
	if len(on) >= q.quorum(k) {
		q.raiseToken(token)
	}
	return tok, on
}

// quorumToken picks the lease's token: that of a lease the id already held
// (its holder knows that token), else the highest granted. differ maps
// the granting nodes that hold another token to theirs.
func quorumToken(replies []store.AcquireReply, granted []int) (token int64, differ map[int]string) {
	existing := false
	for _, i := range granted {
		t, _ := strconv.ParseInt(replies[i].Token, 10, 64)
		switch {
		case replies[i].Existed && (!existing || t > token):
			token, existing = t, true
		case !existing && t > token:
			token = t
		}
	}
	differ = map[int]string{}
	for _, i := range granted {
		if replies[i].Token != strconv.FormatInt(token, 10) {
			differ[i] = replies[i].Token
		}
	}
	return token, differ
}

// setToken gives the lease on the nodes of own (node -> the token that
// node granted) the quorum's token (the write-back), and returns the nodes
// that took it. A node whose write-back failed gives its grant back, by
// its own token, in the background: left there, it was a permit nobody
// refreshes until the TTL (and if the write-back did land, its reply
// lost, the token no longer matches and nothing is removed). The lease's
// next refresh grants it there again (regain).
func (q *Store) setToken(k store.Keyspace, id, token string, own map[int]string) (written []int) {
	if len(own) == 0 {
		return nil
	}
	nodes := make([]int, 0, len(own))
	for i := range own {
		nodes = append(nodes, i)
	}
	orphans := map[int]string{}
	gather(context.Background(), q, nodes, func(ctx context.Context, i int, n *redisstore.Store) (bool, error) {
		return n.SetToken(ctx, k, id, token, own[i])
	}, func(a nodeAnswer[bool]) bool {
		if a.err == nil && a.v {
			written = append(written, a.i)
		} else {
			orphans[a.i] = own[a.i]
		}
		return false
	}, nil)
	if len(orphans) > 0 {
		q.cfg.Spawn(func() { q.releaseOn(k, id, orphans) })
	}
	return written
}

func (q *Store) raiseToken(t int64) {
	for {
		cur := q.lastToken.Load()
		if t <= cur || q.lastToken.CompareAndSwap(cur, t) {
			return
		}
	}
}
