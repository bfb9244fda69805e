package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Listen keeps one pub/sub connection (plain SUBSCRIBE: on a Cluster a
// PUBLISH reaches every node, so one connection to any node hears the
// messages of every slot) subscribed to channels until ctx ends. On a
// Ring, where a script's PUBLISH reaches only its name's shard, it keeps
// one on every shard, and counts as subscribed while all of them are.
func (s *Store) Listen(ctx context.Context, channels []string, deliver func(channel, payload string), subscribed func(error)) {
	ring, ok := s.rdb.(*redis.Ring)
	if !ok {
		listen(ctx, s.rdb.Subscribe, channels, deliver, subscribed)
		return
	}
	shards := ring.GetShardClients()
	if len(shards) == 0 {
		subscribed(errors.New("no Ring shard is up"))
		return
	}
	var mu sync.Mutex
	up := make([]bool, len(shards))
	var wg sync.WaitGroup
	for i, sh := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			listen(ctx, sh.Subscribe, channels, deliver, func(err error) {
				mu.Lock()
				defer mu.Unlock()
				up[i] = err == nil
				switch {
				case err != nil:
					subscribed(fmt.Errorf("shard %s: %w", sh.Options().Addr, err))
				case !slices.Contains(up, false):
					subscribed(nil)
				}
			})
		}()
	}
	wg.Wait()
}

// listen is Listen on one connection, made by subscribe.
func listen(ctx context.Context, subscribe func(context.Context, ...string) *redis.PubSub, channels []string,
	deliver func(channel, payload string), subscribed func(error)) {
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		ps := subscribe(ctx)
		stop := context.AfterFunc(ctx, func() { _ = ps.Close() }) // unblocks a pending receive
		err := ps.Subscribe(ctx, channels...)
		if err == nil {
			err = receive(ctx, ps, deliver, subscribed)
		}
		stop()
		_ = ps.Close()
		if ctx.Err() != nil {
			return
		}
		subscribed(err)
		sleepCtx(ctx, backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// receive hands messages on while the connection lives. go-redis replaces
// a broken connection (and re-subscribes) by itself; one that stays silent
// past a ping is given up on, since a black-holed connection never errs.
func receive(ctx context.Context, ps *redis.PubSub, deliver func(channel, payload string), subscribed func(error)) error {
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, 15*time.Second)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ne interface{ Timeout() bool }
		switch {
		case err != nil && errors.As(err, &ne) && ne.Timeout():
			if pinged {
				return err
			}
			pinged = true
			_ = ps.Ping(ctx)
			continue
		case err != nil:
			subscribed(err)
			sleepCtx(ctx, 10*time.Millisecond)
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				subscribed(nil)
			}
		case *redis.Message:
			deliver(m.Channel, m.Payload)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
