package redisstore

import (
	"context"

	"github.com/redsem/redsem/limiter/internal/store"
)

// Resume runs resume.lua once: the handover of a held lease to r.Owner.
func (s *Store) Resume(ctx context.Context, k store.Keyspace, r store.ResumeRequest) (store.AcquireReply, error) {
	args := append(evalArgs(resumeScript, k, 5),
		r.ID,                 // id
		r.Token,              // token
		r.TTL.Milliseconds(), // ttl_ms
		r.Owner,              // owner
		r.Proposed,           // proposed
	)
	cmd, acked, waitErr := s.eval(ctx, resumeScript, k, r.Replicas, args)
	v, err := cmd.Result()
	if err != nil {
		return store.AcquireReply{}, err
	}
	pair, ok := v.([]any)
	if !ok || len(pair) != 2 {
		return store.AcquireReply{}, nil // not held
	}
	w, _ := pair[0].(int64)
	tok, _ := pair[1].(string)
	return store.AcquireReply{Granted: true, Token: tok, Weight: w, Acked: acked, WaitErr: waitErr}, nil
}
