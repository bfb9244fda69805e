package redisstore

import (
	"context"

	"github.com/redsem/redsem/limiter/internal/store"
)

// SetToken runs settoken.lua once: a quorum's write-back of the token it
// agreed on, over the grant this node made with own. It reports whether
// the lease took it.
func (s *Store) SetToken(ctx context.Context, k store.Keyspace, id, token, own string) (bool, error) {
	n, err := s.run(ctx, setTokenScript, k,
		id,    // id
		token, // token
		own,   // granted
	).Int64()
	return n == 1, err
}
