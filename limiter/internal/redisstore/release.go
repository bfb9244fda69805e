package redisstore

import (
	"context"

	"github.com/redsem/redsem/limiter/internal/store"
)

// Release runs release.lua once.
func (s *Store) Release(ctx context.Context, k store.Keyspace, r store.ReleaseRequest) (store.ReleaseReply, error) {
	args := append(evalArgs(releaseScript, k, 5),
		r.ID,                          // id
		r.Token,                       // token
		s.channel.get(r.Channel, box), // own
		flag(r.Wake),                  // wake
		flag(r.Check),                 // check
	)
	cmd, _, _ := s.eval(ctx, releaseScript, k, store.ReplicaWait{}, args)
	res, err := cmd.Result()
	if err != nil {
		return store.ReleaseReply{}, err
	}
	v, ok := res.([]any)
	if !ok { // the permits alone: no own waiter woken
		freed, _ := res.(int64)
		return store.ReleaseReply{Freed: freed}, nil
	}
	freed, _ := v[0].(int64)
	return store.ReleaseReply{Freed: freed, Woken: stringsOf(v[1:])}, nil
}
