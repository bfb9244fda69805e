package redisstore

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter/internal/store"
)

// usesChunk bounds the names one call of uses.lua records on a single
// server: one call for a Client's 100 names costs Redis one script's
// overhead, not 100, while a call stays short.
const usesChunk = 100

// RecordUses runs uses.lua: on a single server one call per usesChunk
// records, elsewhere (a Cluster, a Ring: names in other slots) one call
// per record, all in one pipeline. The first error is returned.
func (s *Store) RecordUses(ctx context.Context, owner string, ttl time.Duration, records []store.UseRecord) error {
	per := 1
	if s.dep.oneNode {
		per = usesChunk
	}
	var calls []usesCall
	for len(records) > 0 {
		n := min(per, len(records))
		calls = append(calls, usesCallOf(owner, ttl, records[:n]))
		records = records[n:]
	}
	way := s.firstWay(usesScript)
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range calls {
			calls[i].cmd = script(ctx, p, usesScript, way, calls[i].keys, calls[i].args...)
		}
		return nil
	})
	var errs []error
	for _, c := range calls {
		if lacks(way, c.cmd.Err()) {
			c.cmd = s.run(ctx, usesScript, c.keys, c.args...)
		}
		errs = append(errs, c.cmd.Err())
	}
	return errors.Join(errs...)
}

// usesCall is one call of uses.lua.
type usesCall struct {
	keys store.Keyspace
	args []any
	cmd  *redis.Cmd
}

func usesCallOf(owner string, ttl time.Duration, records []store.UseRecord) usesCall {
	c := usesCall{args: []any{
		ttl.Milliseconds(), // ttl_ms
		owner,              // owner
	}}
	for _, r := range records {
		c.keys.Keys = append(c.keys.Keys, r.Key)
		c.keys.Args = append(c.keys.Args, r.Key)
		c.args = append(c.args, len(r.Values)) // count
		for _, v := range r.Values {
			c.args = append(c.args, v) // a value
		}
	}
	return c
}

// ReadUses runs inuse.lua once.
func (s *Store) ReadUses(ctx context.Context, k store.Keyspace) (store.UseState, error) {
	v, err := s.run(ctx, inUseScript, k).StringSlice()
	if err != nil {
		return store.UseState{}, err
	}
	if len(v) < 4 {
		return store.UseState{}, errors.New("unexpected inuse reply")
	}
	st := store.UseState{FleetLimit: atoi(v[0]), Learned: v[2], Now: atoi(v[3]), Owners: map[string]int{}}
	if f := strings.Fields(v[1]); len(f) == 3 {
		st.FleetRate = store.Rate{Events: atoi(f[0]), Per: time.Duration(atoi(f[1])), Burst: atoi(f[2])}
	}
	for _, m := range v[4:] {
		if value, _, ok := strings.Cut(m, "|"); ok {
			st.Owners[value]++
		}
	}
	return st, nil
}

var _ store.Uses = (*Store)(nil)
