package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter/internal/store"
)

// lingerFor (shardWakes.linger) is how long a shard channel stays subscribed after its last
// waiter left: a name waited on again within it costs no SSUBSCRIBE
// round trip (a wait subscribes before its first attempt), and the
// channels of names waited on once are unsubscribed after it.
const lingerFor = 30 * time.Second

// ShardWakes: on a Cluster a plain PUBLISH is sent over the cluster bus to
// every node, so each wake-up would cost every master; an SPUBLISH stays
// in the shard of its channel. Elsewhere a PUBLISH reaches the one server
// it is sent to (a Redlock node, a Sentinel's master) and Listen serves.
func (s *Store) ShardWakes(ctx context.Context, spawn func(func()), deliver func(string), resubscribed func()) store.ShardWakes {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return nil
	}
	return &shardWakes{cc: cc, ctx: ctx, spawn: spawn, deliver: deliver, resubscribed: resubscribed,
		linger: lingerFor, subs: map[string]*shardSub{}, conns: map[string]*shardConn{}}
}

// shardWakes is store.ShardWakes on a go-redis ClusterClient: one PubSub
// per master, each channel on the master of its slot (as of the last slot
// map), moved when that master breaks, refuses it (MOVED) or drops it
// (a migration: the server sends SUNSUBSCRIBE).
type shardWakes struct {
	cc           *redis.ClusterClient
	ctx          context.Context
	spawn        func(func())
	deliver      func(string)
	resubscribed func()
	linger       time.Duration

	mu    sync.Mutex
	subs  map[string]*shardSub  // the channels wanted, or lingering
	conns map[string]*shardConn // by master address
	idle  []idleSub             // lingering channels, oldest first
}

// shardSub is one channel.
type shardSub struct {
	refs    int
	conn    *shardConn // where it is asked for; nil while it is placed
	up      bool       // its master confirmed it
	wasUp   bool       // it was confirmed before: messages may have been lost
	err     error      // why the last attempt failed
	tries   int        // attempts failed in a row: the backoff
	changed chan struct{}
	idleAt  time.Time // its last Drop, while refs is 0
}

type shardConn struct {
	addr string
	ps   *redis.PubSub
}

type idleSub struct {
	channel string
	at      time.Time
}

func (w *shardWakes) Add(ctx context.Context, channel string) error {
	w.mu.Lock()
	sub := w.subs[channel]
	fresh := sub == nil
	if fresh {
		sub = &shardSub{changed: make(chan struct{})}
		w.subs[channel] = sub
		w.spawn(func() { w.place(channel) })
	}
	sub.refs++
	if sub.up || errors.Is(sub.err, store.ErrNoShardPubSub) {
		defer w.mu.Unlock()
		return sub.err
	}
	changed := sub.changed
	w.mu.Unlock()
	select {
	case <-changed:
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return sub.err
}

func (w *shardWakes) Drop(channel string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if sub := w.subs[channel]; sub != nil {
		if sub.refs--; sub.refs == 0 {
			sub.idleAt = now
			w.idle = append(w.idle, idleSub{channel, now})
		}
	}
	w.sweep(now)
}

// sweep unsubscribes the channels nobody waited on for w.linger. It runs
// on each Drop: while channels are added (each Add has its Drop), the
// lingering ones are swept too.
func (w *shardWakes) sweep(now time.Time) {
	for len(w.idle) > 0 && now.Sub(w.idle[0].at) >= w.linger {
		e := w.idle[0]
		w.idle = w.idle[1:]
		sub := w.subs[e.channel]
		if sub == nil || sub.refs > 0 || !sub.idleAt.Equal(e.at) {
			continue // waited on again since
		}
		delete(w.subs, e.channel)
		if sub.conn != nil {
			_ = sub.conn.ps.SUnsubscribe(w.ctx, e.channel)
		}
	}
}

// place asks the master of channel's slot to subscribe it; receive hears
// the answer.
func (w *shardWakes) place(channel string) {
	node, err := w.cc.MasterForKey(w.ctx, channel)
	var c *shardConn
	if err == nil {
		c, err = w.connTo(node)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	sub := w.subs[channel]
	if sub == nil || sub.conn != nil || w.ctx.Err() != nil {
		return // swept, or placed by another
	}
	if err == nil && w.conns[c.addr] != c {
		err = errors.New("connection lost")
	}
	if err == nil {
		if err = c.ps.SSubscribe(w.ctx, channel); err == nil {
			sub.conn = c
			return
		}
	}
	w.failed(channel, sub, err)
}

// connTo returns the PubSub on node, connecting one the first time.
func (w *shardWakes) connTo(node *redis.Client) (*shardConn, error) {
	addr := node.Options().Addr
	w.mu.Lock()
	c := w.conns[addr]
	w.mu.Unlock()
	if c != nil {
		return c, nil
	}
	// Connected by a PING rather than by the first SSUBSCRIBE, which
	// go-redis would send twice (once as its resubscription).
	ps := node.SSubscribe(w.ctx)
	if err := ps.Ping(w.ctx); err != nil {
		_ = ps.Close()
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if old := w.conns[addr]; old != nil || w.ctx.Err() != nil {
		_ = ps.Close()
		return old, w.ctx.Err()
	}
	c = &shardConn{addr: addr, ps: ps}
	w.conns[addr] = c
	w.spawn(func() { w.receive(c) })
	return c, nil
}

// failed records why channel is not subscribed and, unless the server
// refuses sharded pub/sub outright, tries again after a backoff on a
// fresh slot map. A lingering channel is forgotten instead. Called with
// w.mu held.
func (w *shardWakes) failed(channel string, sub *shardSub, err error) {
	if refusesShards(err) {
		err = fmt.Errorf("%w: %v", store.ErrNoShardPubSub, err)
	}
	sub.conn, sub.up, sub.err = nil, false, err
	close(sub.changed)
	sub.changed = make(chan struct{})
	if sub.refs == 0 {
		delete(w.subs, channel)
		return
	}
	if errors.Is(err, store.ErrNoShardPubSub) {
		return
	}
	delay := min(10*time.Millisecond<<min(sub.tries, 7), time.Second)
	sub.tries++
	w.spawn(func() {
		sleepCtx(w.ctx, delay)
		if w.ctx.Err() == nil {
			w.cc.ReloadState(w.ctx)
			w.place(channel)
		}
	})
}

// refusesShards: the server does not know SSUBSCRIBE (before Redis 7) or
// the ACL refuses it or the channel.
func refusesShards(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(strings.ToLower(msg), "unknown command")
}

// receive hands c's messages on until c breaks (then its channels are
// placed again) or ctx ends. One that stays silent past a ping is given up
// on, since a black-holed connection never errs.
func (w *shardWakes) receive(c *shardConn) {
	stop := context.AfterFunc(w.ctx, func() { _ = c.ps.Close() }) // unblocks a pending receive
	defer stop()
	pinged := false
	for {
		msg, err := c.ps.ReceiveTimeout(w.ctx, 15*time.Second)
		if w.ctx.Err() != nil {
			return
		}
		var timeout interface{ Timeout() bool }
		var refusal redis.Error
		switch {
		case err != nil && errors.As(err, &timeout) && timeout.Timeout() && !pinged:
			pinged = true
			_ = c.ps.Ping(w.ctx)
			continue
		case err != nil && errors.As(err, &refusal):
			w.refused(c, err)
			continue
		case err != nil:
			w.broken(c, err)
			return
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			w.answered(c, m)
		case *redis.Message:
			w.deliver(m.Payload)
		}
	}
}

// answered takes c's answer to an SSUBSCRIBE, or an SUNSUBSCRIBE: ours
// (of a channel swept, ignored), or the server's when the channel's slot
// left the master.
func (w *shardWakes) answered(c *shardConn, m *redis.Subscription) {
	w.mu.Lock()
	sub := w.subs[m.Channel]
	again := false
	switch {
	case sub == nil || sub.conn != c:
	case m.Kind == "ssubscribe" && !sub.up:
		again = sub.wasUp
		sub.up, sub.wasUp, sub.err, sub.tries = true, true, nil, 0
		close(sub.changed)
		sub.changed = make(chan struct{})
	case m.Kind == "sunsubscribe" && sub.up:
		w.failed(m.Channel, sub, errors.New("the server unsubscribed it: its slot moved"))
	}
	w.mu.Unlock()
	if again {
		w.resubscribed()
	}
}

// refused takes an error reply on c: to one of the SSUBSCRIBEs awaiting
// their answer (MOVED, NOPERM, an unknown command). The reply does not
// name its channel, so each of them is placed again; those the master
// took are confirmed on the way.
func (w *shardWakes) refused(c *shardConn, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch, sub := range w.subs {
		if sub.conn == c && !sub.up {
			w.failed(ch, sub, err)
		}
	}
}

// broken drops c and places its channels again.
func (w *shardWakes) broken(c *shardConn, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conns[c.addr] == c {
		delete(w.conns, c.addr)
	}
	_ = c.ps.Close()
	for ch, sub := range w.subs {
		if sub.conn == c {
			w.failed(ch, sub, err)
		}
	}
}
