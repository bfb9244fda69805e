package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// Acquire runs acquire.lua once.
func (s *Store) Acquire(ctx context.Context, k store.Keyspace, r store.AcquireRequest) (store.AcquireReply, error) {
	// ARGV, one per line under acquire.lua's names for them.
	args := append(evalArgs(acquireScript, k, 15),
		r.Limit,                             // limit
		r.Weight,                            // weight
		s.ms.get(r.TTL.Milliseconds(), box), // ttl_ms
		r.ID,                                // id
		r.Proposed,                          // proposed
		s.owner.get(r.Owner, box),           // owner
		r.ReclaimAbove,                      // reclaim_above
		r.Wait,                              // wait
		queueTTLms,                          // queue_ttl_ms
		s.channel.get(r.Channel, box),       // own
		flag(s.fifo),                        // fifo
		flag(r.DirectGrant),                 // direct_grant
		s.ms.get(r.Quarantine.Milliseconds(), box), // quarantine_ms
		flag(r.ExactToken),                         // exact
		learnLimit(r.Learn),                        // learn
	)
	cmd, acked, waitErr := s.eval(ctx, acquireScript, k, r.Replicas, args)
	v, err := cmd.Slice()
	if err != nil {
		return store.AcquireReply{}, err
	}
	rep, err := parseAcquire(v)
	rep.Acked, rep.WaitErr = acked, waitErr
	return rep, err
}

// learnLimit is acquire.lua's learn: "min start", or "" for a fixed
// limit.
func learnLimit(l store.Learn) string {
	if l.Start == 0 {
		return ""
	}
	return fmt.Sprintf("%d %d", l.Min, l.Start)
}

func parseAcquire(v []any) (store.AcquireReply, error) {
	if len(v) < 2 {
		return store.AcquireReply{}, fmt.Errorf("unexpected acquire reply %v", v)
	}
	switch code, _ := v[0].(int64); {
	case code == -1:
		w, _ := v[1].(int64)
		return store.AcquireReply{HeldWeight: w}, nil
	case code == -2:
		n, _ := v[1].(int64)
		return store.AcquireReply{FleetLimit: max(n, 1)}, nil
	case code == 1 && len(v) >= 5:
		tok, _ := v[1].(string)
		w, _ := v[2].(int64)
		free, _ := v[3].(int64)
		existed, _ := v[4].(int64)
		return store.AcquireReply{Granted: true, Token: tok, Weight: w, Free: max(free, 0), Existed: existed == 1,
			Woken: stringsOf(v[5:])}, nil
	case code == 0 && len(v) == 7:
		wait, _ := v[1].(int64)
		inUse, _ := v[2].(int64)
		head, _ := v[3].(int64)
		last, _ := v[4].(string)
		restarted, _ := v[5].(int64)
		limit, _ := v[6].(int64)
		rep := store.AcquireReply{RetryIn: time.Duration(max(wait, 0)) * time.Millisecond, InUse: inUse, Head: head == 1,
			LastToken: last, Restarted: restarted == 1, Paused: restarted == 2, Limit: limit}
		if rep.Restarted {
			rep.Quarantine = rep.RetryIn
		}
		return rep, nil
	}
	return store.AcquireReply{}, fmt.Errorf("unexpected acquire reply %v", v)
}
