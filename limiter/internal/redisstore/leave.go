package redisstore

import (
	"context"

	"github.com/redsem/redsem/limiter/internal/store"
)

// Leave runs leave.lua once: a waiter that gave up leaves the queue.
func (s *Store) Leave(ctx context.Context, k store.Keyspace, wait, channel string) ([]string, error) {
	v, err := s.run(ctx, leaveScript, k,
		wait,    // wait
		channel, // own
	).Slice()
	return stringsOf(v), err
}
