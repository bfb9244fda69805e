package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// Waiters runs waiters.lua once.
func (s *Store) Waiters(ctx context.Context, k store.Keyspace, max int) ([]store.Waiter, error) {
	v, err := s.run(ctx, waitersScript, k,
		max, // max_n
	).Slice()
	if err != nil {
		return nil, err
	}
	if len(v)%4 != 0 {
		return nil, errors.New("unexpected waiters reply")
	}
	ws := make([]store.Waiter, 0, len(v)/4)
	for i := 0; i < len(v); i += 4 {
		id, _ := v[i].(string)
		w, _ := v[i+1].(int64)
		left, _ := v[i+2].(int64)
		limit, _ := v[i+3].(int64)
		ws = append(ws, store.Waiter{ID: id, Weight: w, TTL: time.Duration(left) * time.Millisecond, Limit: limit})
	}
	return ws, nil
}
