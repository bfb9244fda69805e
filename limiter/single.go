package limiter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisStore keeps leases in one Redis deployment: a node, a Sentinel
// failover client or a Cluster (every key of a semaphore is in one slot).
type redisStore struct {
	rdb redis.UniversalClient
	// publish is the command release.lua wakes waiters with: sharded
	// pub/sub on Cluster, so a message goes to one shard rather than to
	// every node; plain PUBLISH elsewhere (miniredis has no SPUBLISH).
	publish string
}

func newRedisStore(rdb redis.UniversalClient) *redisStore {
	s := &redisStore{rdb: rdb, publish: "PUBLISH"}
	if _, ok := rdb.(*redis.ClusterClient); ok {
		s.publish = "SPUBLISH"
	}
	return s
}

func (s *redisStore) identity() any { return s.rdb }

func (s *redisStore) acquire(ctx context.Context, k keyspace, r acquireRequest) (acquireReply, error) {
	v, err := acquireScript.Run(ctx, s.rdb, k.keys, r.limit, r.weight, r.ttl.Milliseconds(), r.id, r.proposed).Slice()
	if err != nil {
		return acquireReply{}, err
	}
	return parseAcquire(v)
}

func parseAcquire(v []any) (acquireReply, error) {
	if len(v) < 3 {
		return acquireReply{}, fmt.Errorf("unexpected acquire reply %v", v)
	}
	granted, _ := v[0].(int64)
	if granted == 1 && len(v) == 5 {
		tok, _ := v[1].(string)
		w, _ := v[2].(int64)
		free, _ := v[3].(int64)
		existed, _ := v[4].(int64)
		return acquireReply{granted: true, token: tok, weight: w, free: max(free, 0), existed: existed == 1}, nil
	}
	wait, _ := v[1].(int64)
	inUse, _ := v[2].(int64)
	return acquireReply{retryIn: time.Duration(max(wait, 0)) * time.Millisecond, inUse: inUse}, nil
}

func (s *redisStore) refresh(ctx context.Context, reqs []refreshRequest) []refreshReply {
	out := make([]refreshReply, len(reqs))
	if len(reqs) == 1 {
		out[0] = parseRefresh(s.runRefresh(ctx, s.rdb, reqs[0], true))
		return out
	}
	cmds := make([]*redis.Cmd, len(reqs))
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range reqs {
			cmds[i] = s.runRefresh(ctx, p, r, false)
		}
		return nil
	})
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			c = s.runRefresh(ctx, s.rdb, reqs[i], true)
		}
		out[i] = parseRefresh(c)
	}
	return out
}

func (s *redisStore) runRefresh(ctx context.Context, c redis.Scripter, r refreshRequest, fallback bool) *redis.Cmd {
	args := []any{r.id, r.token, r.ttl.Milliseconds()}
	if fallback {
		return refreshScript.Run(ctx, c, r.keys.keys, args...)
	}
	return refreshScript.EvalSha(ctx, c, r.keys.keys, args...)
}

func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

func parseRefresh(c *redis.Cmd) refreshReply {
	v, err := c.Result()
	if err != nil {
		return refreshReply{err: err}
	}
	pair, ok := v.([]any)
	if !ok || len(pair) != 2 {
		return refreshReply{} // 0: gone
	}
	w, _ := pair[0].(int64)
	tok, _ := pair[1].(string)
	return refreshReply{held: true, weight: w, token: tok}
}

func (s *redisStore) release(ctx context.Context, k keyspace, id, token, origin string) (int64, error) {
	return releaseScript.Run(ctx, s.rdb, k.keys, id, token, s.publish, k.channel, origin).Int64()
}

func (s *redisStore) holders(ctx context.Context, k keyspace) ([]Holder, error) {
	v, err := holdersScript.Run(ctx, s.rdb, k.keys).Slice()
	if err != nil {
		return nil, err
	}
	return parseHolders(v)
}

func parseHolders(v []any) ([]Holder, error) {
	if len(v)%4 != 0 {
		return nil, errors.New("unexpected holders reply")
	}
	hs := make([]Holder, 0, len(v)/4)
	for i := 0; i < len(v); i += 4 {
		id, _ := v[i].(string)
		w, _ := v[i+1].(int64)
		tok, _ := v[i+2].(string)
		left, _ := v[i+3].(int64)
		t, _ := strconv.ParseInt(tok, 10, 64)
		hs = append(hs, Holder{ID: id, Weight: w, Token: t, TTL: time.Duration(left) * time.Millisecond})
	}
	return hs, nil
}

func (s *redisStore) subscribe(ctx context.Context, channel string) (subscription, error) {
	var ps *redis.PubSub
	if s.publish == "SPUBLISH" {
		ps = s.rdb.SSubscribe(ctx, channel)
	} else {
		ps = s.rdb.Subscribe(ctx, channel)
	}
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, err
	}
	// The health check pings only an idle connection, so a dead one is
	// noticed and re-subscribed; 15s keeps a quiet wait nearly free.
	return pubsubSub{ps: ps, ch: ps.Channel(redis.WithChannelHealthCheckInterval(15 * time.Second))}, nil
}

type pubsubSub struct {
	ps *redis.PubSub
	ch <-chan *redis.Message
}

func (p pubsubSub) messages() <-chan *redis.Message { return p.ch }
func (p pubsubSub) close()                          { _ = p.ps.Close() }
