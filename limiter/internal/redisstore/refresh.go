package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter/internal/store"
)

// refreshChunk bounds the leases one refresh script call keeps alive, so
// one call's Redis time stays bounded however many a Client holds.
const refreshChunk = 2000

// refreshCall is one call of the refresh script: a batch or a chunk of
// one.
type refreshCall struct {
	batch int
	args  []any
	cmd   *redis.Cmd
	// acked and waitErr answer the WAIT that followed it, when its batch
	// asks for replicas.
	acked   int
	waitErr error
}

// Refresh runs refresh.lua for every batch: those that ask for replicas
// end in WAIT (refreshWaited), the others go in one pipeline.
func (s *Store) Refresh(ctx context.Context, batches []store.RefreshBatch) []store.RefreshResult {
	var calls, plain, waited []*refreshCall
	for i, b := range batches {
		for _, args := range refreshArgs(b) {
			c := &refreshCall{batch: i, args: args}
			calls = append(calls, c)
			if b.Replicas.On() {
				waited = append(waited, c)
			} else {
				plain = append(plain, c)
			}
		}
	}
	if len(waited) == 0 {
		s.refreshPlain(ctx, batches, plain)
	} else {
		// At once: a WAIT that takes its timeout does not hold up the
		// refreshes that need none.
		runAll(func() { s.refreshPlain(ctx, batches, plain) }, func() { s.refreshWaited(ctx, batches, waited) })
	}
	out := make([]store.RefreshResult, len(batches))
	for _, c := range calls {
		r := &out[c.batch]
		// The calls of a batch share its node's pipeline, and one WAIT.
		r.Acked, r.WaitErr = c.acked, c.waitErr
		v, err := c.cmd.Slice()
		if err != nil {
			r.Err = err
			continue
		}
		n, _ := strconv.Atoi(fmt.Sprint(c.args[0]))
		for j, x := range v {
			code, _ := x.(int64)
			if j < n {
				r.Held = append(r.Held, code == 1)
			} else {
				r.Waits = append(r.Waits, code)
			}
		}
	}
	for i := range out {
		if out[i].Err != nil {
			out[i].Held, out[i].Waits = nil, nil
		}
	}
	return out
}

// refreshPlain sends calls as one pipeline, each the first way this
// server takes (send.go); a call the server lacked the function or script
// for goes again through eval, which loads it.
func (s *Store) refreshPlain(ctx context.Context, batches []store.RefreshBatch, calls []*refreshCall) {
	if len(calls) == 0 {
		return
	}
	way := s.firstWay(refreshScript)
	addrs, refused := s.admitAll(ctx, batches, calls)
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			if err := refused[addrs[i]]; err != nil {
				c.cmd = scriptCmd(ctx, refreshScript, way, append(evalArgs(refreshScript, batches[c.batch].Keys, len(c.args)), c.args...))
				c.cmd.SetErr(err)
				continue
			}
			c.cmd = script(ctx, p, refreshScript, way, batches[c.batch].Keys, c.args...)
		}
		return nil
	})
	for i, c := range calls {
		if refused[addrs[i]] == nil {
			s.observe(ctx, addrs[i], c.cmd.Err())
		}
		if lacks(way, c.cmd.Err()) {
			k := batches[c.batch].Keys
			c.cmd, _, _ = s.eval(ctx, refreshScript, k, store.ReplicaWait{}, append(evalArgs(refreshScript, k, len(c.args)), c.args...))
		}
	}
}

// admitAll returns the Cluster node address of each call ("" elsewhere),
// and the error of those that did not answer lately: admitted once per
// pipeline, so that one call's try does not refuse its neighbours.
func (s *Store) admitAll(ctx context.Context, batches []store.RefreshBatch, calls []*refreshCall) ([]string, map[string]error) {
	addrs := make([]string, len(calls))
	refused := map[string]error{}
	for i, c := range calls {
		addrs[i] = s.clusterAddr(ctx, batches[c.batch].Keys.ID())
		if _, seen := refused[addrs[i]]; !seen {
			refused[addrs[i]] = s.admit(addrs[i])
		}
	}
	return addrs, refused
}

// refreshArgs splits a batch into script calls of at most refreshChunk
// leases or waiters (Lua's unpack takes a few thousand values at most).
func refreshArgs(b store.RefreshBatch) [][]any {
	var out [][]any
	leases, waits := b.Leases, b.Waits
	for {
		n := min(len(leases), refreshChunk)
		m := min(len(waits), refreshChunk/2)
		if n > 0 {
			m = 0 // waiters go in calls of their own
		}
		args := make([]any, 0, 1+3*n+1+m)
		args = append(args, n) // n
		for _, l := range leases[:n] {
			args = append(args, l.ID, l.Token, l.TTL.Milliseconds()) // lease i's id, token, ttl_ms
		}
		if m > 0 {
			args = append(args, store.QueueTTL.Milliseconds()) // queue_ttl_ms
			for _, w := range waits[:m] {
				args = append(args, w) // a wait id
			}
		}
		leases, waits = leases[n:], waits[m:]
		out = append(out, args)
		if len(leases) == 0 && len(waits) == 0 {
			return out
		}
	}
}
