package redisstore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter/internal/store"
)

// SetLimit runs setlimit.lua once.
func (s *Store) SetLimit(ctx context.Context, k store.Keyspace, n int64, channel string, ttl time.Duration) ([]string, error) {
	v, err := s.run(ctx, setLimitScript, k,
		n,                  // n
		channel,            // own
		ttl.Milliseconds(), // ttl_ms
	).Slice()
	if err != nil {
		return nil, err
	}
	return stringsOf(v), nil
}

// FleetLimit reads the limit SetLimit stored (0: none).
func (s *Store) FleetLimit(ctx context.Context, k store.Keyspace) (int64, error) {
	v, err := s.rdb.HGet(ctx, k.Keys[1], "cap").Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}
