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
// in the shard of its channel. On a Ring the script's PUBLISH reaches
// only the name's shard, so one subscription on one shard missed the
// others' wake-ups. Elsewhere a PUBLISH reaches the one server it is sent
// to (a Redlock node, a Sentinel's master) and Listen serves.
func (s *Store) ShardWakes(ctx context.Context, spawn func(func()), deliver func(string), resubscribed func()) store.ShardWakes {
	switch s.rdb.(type) {
	case *redis.ClusterClient, *redis.Ring:
	default:
		return nil
	}
	return &shardWakes{nodeFor: s.dep.nodeFor, reload: s.dep.reload, ctx: ctx, spawn: spawn, deliver: deliver, resubscribed: resubscribed,
		linger: lingerFor, subs: map[string]*shardSub{}, conns: map[string]*shardConn{}, again: map[string]bool{},
		delay: minRetry}
}

// shardWakes is store.ShardWakes on a go-redis ClusterClient (or Ring):
// one PubSub per master, each channel on the master of its slot (as of the
// last slot map), moved when that master breaks, refuses it (MOVED) or
// drops it (a migration: the server sends SUNSUBSCRIBE).
type shardWakes struct {
	nodeFor      func(ctx context.Context, key string) (*redis.Client, error)
	reload       func(ctx context.Context) // the slot map (nil: a Ring's is fixed)
	ctx          context.Context
	spawn        func(func())
	deliver      func(string)
	resubscribed func()
	linger       time.Duration

	mu    sync.Mutex
	subs  map[string]*shardSub  // the channels wanted, or lingering
	conns map[string]*shardConn // by master address
	idle  []idleSub             // lingering channels, oldest first
	// again holds the channels to place again; retrying says its loop
	// runs, waiting delay between passes: doubled by each pass, reset by
	// a confirmation, so that a slot map that stays stale (every pass
	// ends in MOVED) or a master that stays down is not hammered.
	again    map[string]bool
	retrying bool
	delay    time.Duration
}

// shardSub is one channel.
type shardSub struct {
	refs int
	conn *shardConn // where it is asked for; nil while it is placed
	up   bool       // its master confirmed it
	// missed: waiters may have queued while it was not up (it was lost,
	// or an Add returned its error), so their wake-ups may be lost: when
	// it is up again, each tries once (resubscribed).
	missed  bool
	err     error // why the last attempt failed
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
		w.spawn(func() { w.place(channel, map[string]error{}) })
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
		return context.Cause(ctx) // the caller gives up: nobody queues
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !sub.up {
		sub.missed = true
	}
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
// the answer. unreachable: the masters that failed this pass, not asked
// again.
func (w *shardWakes) place(channel string, unreachable map[string]error) {
	node, err := w.nodeFor(w.ctx, channel)
	var c *shardConn
	if err == nil {
		addr := node.Options().Addr
		if err = unreachable[addr]; err == nil {
			if c, err = w.connTo(node); err != nil {
				unreachable[addr] = err
			}
		}
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
	// A master just demoted (a manual failover) is one the slot map may
	// still name for a few hundred ms. It takes an SSUBSCRIBE of its new
	// master's slots, as a replica, but hears only what reaches it over
	// the cluster bus, which the new master may not yet send it: the next
	// wake-up took the keep-alive (~930 ms) rather than <1 ms
	// (TestClusterWakesAfterFailover/manual). An ACL refusing ROLE
	// skips the check.
	if role, err := node.Do(w.ctx, "ROLE").Slice(); err == nil && len(role) > 0 && role[0] != "master" {
		return nil, fmt.Errorf("%s is a %v, not a master", addr, role[0])
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
	sub.missed = sub.missed || sub.up
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
	w.again[channel] = true
	if !w.retrying {
		w.retrying = true
		w.spawn(w.retry)
	}
}

const minRetry, maxRetry = 10 * time.Millisecond, 250 * time.Millisecond

// retry places the channels in again, in passes on a fresh slot map, until
// none is left.
func (w *shardWakes) retry() {
	for {
		w.mu.Lock()
		delay := w.delay
		w.delay = min(2*w.delay, maxRetry)
		w.mu.Unlock()
		sleepCtx(w.ctx, delay)
		if w.ctx.Err() != nil {
			return
		}
		if w.reload != nil {
			w.reload(w.ctx)
		}
		w.mu.Lock()
		chans := make([]string, 0, len(w.again))
		for ch := range w.again {
			chans = append(chans, ch)
		}
		clear(w.again)
		w.retrying = len(chans) > 0
		w.mu.Unlock()
		if len(chans) == 0 {
			return
		}
		unreachable := map[string]error{}
		for _, ch := range chans {
			w.place(ch, unreachable)
		}
	}
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
			if !w.answered(c, m) {
				w.broken(c, errors.New("the server unsubscribed a channel: its slot moved, or its master is a replica now"))
				return
			}
		case *redis.Message:
			w.deliver(m.Payload)
		}
	}
}

// answered takes c's answer to an SSUBSCRIBE, or an SUNSUBSCRIBE: ours
// (of a channel swept, ignored), or the server's when the channel's slot
// left the master, or the master became a replica. It returns false for
// the server's: c's master is then not to be trusted with any channel.
func (w *shardWakes) answered(c *shardConn, m *redis.Subscription) bool {
	w.mu.Lock()
	sub := w.subs[m.Channel]
	again := false
	switch {
	case sub == nil || sub.conn != c:
	case m.Kind == "ssubscribe" && !sub.up:
		again = sub.missed
		sub.up, sub.missed, sub.err = true, false, nil
		w.delay = minRetry
		close(sub.changed)
		sub.changed = make(chan struct{})
	case m.Kind == "sunsubscribe" && sub.up:
		w.mu.Unlock()
		return false
	}
	w.mu.Unlock()
	if again {
		w.resubscribed()
	}
	return true
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
