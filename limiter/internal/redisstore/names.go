package redisstore

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter/internal/store"
)

// Names SCANs every master for the keys that match pattern: a state key's
// (store.StatePattern) or a rate key's (store.RatePattern).
func (s *Store) Names(ctx context.Context, pattern string) ([]string, error) {
	var mu sync.Mutex
	seen := map[string]bool{}
	var out []string
	err := s.dep.masters(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			name, ok := store.NameOfStateKey(it.Val())
			if !ok {
				name, ok = store.NameOfRateKey(it.Val())
			}
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
