package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Listen keeps one pub/sub connection (plain SUBSCRIBE: on a Cluster a
// PUBLISH reaches every node, so one connection to any node hears the
// wake-ups of every slot) subscribed to channel until ctx ends.
func (s *Store) Listen(ctx context.Context, channel string, deliver func(string), subscribed func(error)) {
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		ps := s.rdb.Subscribe(ctx)
		stop := context.AfterFunc(ctx, func() { _ = ps.Close() }) // unblocks a pending receive
		err := ps.Subscribe(ctx, channel)
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
func receive(ctx context.Context, ps *redis.PubSub, deliver func(string), subscribed func(error)) error {
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
			deliver(m.Payload)
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
