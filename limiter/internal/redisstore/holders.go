package redisstore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// Holders runs holders.lua once.
func (s *Store) Holders(ctx context.Context, k store.Keyspace) ([]store.Holder, error) {
	v, err := s.run(ctx, holdersScript, k).Slice()
	if err != nil {
		return nil, err
	}
	if len(v)%4 != 0 {
		return nil, errors.New("unexpected holders reply")
	}
	hs := make([]store.Holder, 0, len(v)/4)
	for i := 0; i < len(v); i += 4 {
		id, _ := v[i].(string)
		w, _ := v[i+1].(int64)
		tok, _ := v[i+2].(string)
		left, _ := v[i+3].(int64)
		t, _ := strconv.ParseInt(tok, 10, 64)
		hs = append(hs, store.Holder{ID: id, Weight: w, Token: t, TTL: time.Duration(left) * time.Millisecond})
	}
	return hs, nil
}
