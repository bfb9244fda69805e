package limiter

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

func (s *redisStore) setLimit(ctx context.Context, k keyspace, n int64, own string, ttl time.Duration) ([]string, error) {
	v, err := setLimitScript.Run(ctx, s.rdb, k.keys, n, own, ttl.Milliseconds()).Slice()
	if err != nil {
		return nil, err
	}
	return stringsOf(v), nil
}

func (s *redisStore) fleetLimit(ctx context.Context, k keyspace) (int64, error) {
	v, err := s.rdb.HGet(ctx, k.keys[1], "cap").Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

func (s *redisStore) names(ctx context.Context, pattern string) ([]string, error) {
	var mu sync.Mutex
	seen := map[string]bool{}
	var out []string
	err := s.eachMaster(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			name, ok := nameOfStateKey(it.Val())
			mu.Lock()
			if ok && !seen[name] {
				seen[name] = true
				out = append(out, name)
			}
			mu.Unlock()
		}
		return it.Err()
	})
	return out, err
}

// eachMaster runs fn on every master of a Cluster or shard of a Ring, in
// parallel (so fn locks what it shares), or once on any other deployment.
func (s *redisStore) eachMaster(ctx context.Context, fn func(ctx context.Context, c redis.UniversalClient) error) error {
	each := func(ctx context.Context, c *redis.Client) error { return fn(ctx, c) }
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, each)
	case *redis.Ring:
		return c.ForEachShard(ctx, each)
	}
	return fn(ctx, s.rdb)
}

func (s *redisStore) waiters(ctx context.Context, k keyspace, max int) ([]Waiter, error) {
	v, err := waitersScript.Run(ctx, s.rdb, k.keys, max).Slice()
	if err != nil {
		return nil, err
	}
	if len(v)%3 != 0 {
		return nil, errors.New("unexpected waiters reply")
	}
	ws := make([]Waiter, 0, len(v)/3)
	for i := 0; i < len(v); i += 3 {
		id, _ := v[i].(string)
		w, _ := v[i+1].(int64)
		left, _ := v[i+2].(int64)
		ws = append(ws, Waiter{ID: id, Weight: w, TTL: time.Duration(left) * time.Millisecond})
	}
	return ws, nil
}
