package limiter

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// hub delivers wake-ups to this Client's waiters. A release in any process
// publishes the ids of the queued waiters it now has room for on the wake
// channel each one queued with, so a release wakes only those who can now
// be granted. A message "id token" says the release granted the waiter its
// lease (a direct grant).
//
// The channel is the Client's one channel (one subscription whatever the
// number of names it waits on), but on a Cluster with sharded pub/sub,
// where a PUBLISH would reach every node, and on a Ring, where it would
// reach only the name's shard: there each name has its own channel in its
// shard (store.Keyspace.WakeChannel), subscribed while the Client waits
// on the name (store.ShardWakes), and the scripts SPUBLISH to it
// (common.lua's pass_on tells the two kinds by the name's '{').
type hub struct {
	c *Client
	// shards subscribes the names' channels (nil: neither a Cluster nor a
	// Ring); noShards is set once the servers refused it, for the
	// Client's life.
	shards   store.ShardWakes
	noShards atomic.Bool

	// holds are the reservations that the pauses heard of on the
	// subscription move (store.PauseChannel; see Reservation).
	holds holds
	// listening: the subscription was started (started, read without mu).
	listening atomic.Bool

	mu         sync.Mutex
	waiters    map[string]*waiter
	started    bool
	subscribed bool          // the subscription is live now
	lastErr    error         // why the last subscription attempt failed
	changed    chan struct{} // closed and replaced on every attempt's outcome
}

// waiter is one Acquire waiting in a queue.
type waiter struct {
	id    string // its queue entry, unique across processes
	sem   *Semaphore
	hub   *hub
	wake  chan struct{}
	shard string // the shard channel it was readied on, dropped on leave

	mu sync.Mutex
	// granted is the token of the lease a release granted it ("": none).
	granted string
	// queuedAt is when the latest request that Redis answered with this
	// waiter still queued was sent: a direct grant not made stale by
	// floor came after it.
	queuedAt time.Time
	// floor is the highest last-issued token of those answers: a direct
	// grant announced with a token no higher came before one of them, so
	// its lease expired before that request re-queued the waiter.
	floor int64
	// headAt: a script made the waiter the queue's head (common.lua's
	// pass_on), whose timer is to try at this time, the earliest expiry
	// (zero: no such word since the last wake-up was taken).
	headAt time.Time
	// tryNow: a wake-up asked for an attempt now (a release, a
	// reconnect, the keep-alive), which a head notice does not replace.
	tryNow bool
}

func newHub(c *Client) *hub {
	h := &hub{c: c, waiters: map[string]*waiter{}, changed: make(chan struct{})}
	h.shards = c.st.ShardWakes(c.ctx, c.spawn, h.deliver, h.signalAll)
	return h
}

// channel is where releases wake this Client's waiters on the semaphore
// whose shard channel is shard.
func (h *hub) channel(shard string) string {
	if h.shards == nil || h.noShards.Load() {
		return h.c.channel
	}
	return shard
}

// ready returns once the wake channel of s's waiters is subscribed: no
// wake-up published after that can be missed. It returns the shard
// channel it added ("": the Client's one channel), which the waiter joined
// with it drops when it leaves, whatever the error: that of the next
// attempt when the subscription is down, ErrClosed once the Client
// closed, ctx's cause when ctx ends first. Where the servers refuse
// sharded pub/sub, the Client falls back to its one channel.
func (h *hub) ready(ctx context.Context, s *Semaphore) (shard string, err error) {
	if ch := h.channel(s.wake); ch != h.c.channel {
		err := h.shards.Add(ctx, ch)
		switch {
		case h.c.ctx.Err() != nil:
			return ch, ErrClosed
		case err == nil:
			return ch, nil
		case !errors.Is(err, store.ErrNoShardPubSub):
			// Not placed now (the shard's master unreachable, a stale
			// slot map): this wait goes by the Client's one channel, which
			// every server can publish to, not by a shard channel that a
			// release may be unable to SPUBLISH or nobody hears.
			h.shards.Drop(ch)
			return "", h.readyOne(ctx)
		}
		h.noShards.Store(true)
		h.shards.Drop(ch)
		s.cfg.logger.Info("redsem: sharded pub/sub refused; wake-ups go by plain PUBLISH", "err", err)
	}
	return "", h.readyOne(ctx)
}

// channel is where releases wake w: the channel it was readied on.
func (w *waiter) channel() string {
	if w.shard != "" {
		return w.shard
	}
	return w.hub.c.channel
}

// readyOne readies the Client's one channel: it starts the subscription
// on first use.
func (h *hub) readyOne(ctx context.Context) error {
	h.mu.Lock()
	if h.subscribed {
		h.mu.Unlock()
		return nil
	}
	h.startLocked()
	ch := h.changed
	h.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-h.c.ctx.Done():
		return ErrClosed
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subscribed {
		return nil
	}
	return h.lastErr
}

// listen starts the subscription, if it has not started, without waiting
// for it: a reservation that has to wait hears the pauses on it.
func (h *hub) listen() {
	if h.listening.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.startLocked()
}

// startLocked starts the subscription once, on the Client's one channel
// and the pauses' (store.PauseChannel).
func (h *hub) startLocked() {
	if h.started {
		return
	}
	h.started = true
	h.listening.Store(true)
	pauses := store.PauseChannel(h.c.cfg.prefix)
	h.c.spawn(func() {
		h.c.st.Listen(h.c.ctx, []string{h.c.channel, pauses}, func(channel, msg string) {
			if channel != pauses {
				h.deliver(msg)
			} else if n, ok := store.ParsePauseNotice(msg, h.c.cfg.prefix); ok {
				h.holds.paused(n)
			}
		}, h.outcome)
	})
}

// outcome records a subscription attempt. After a reconnect every waiter
// tries once: a wake-up published while the connection was down is lost.
func (h *hub) outcome(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	was := h.subscribed
	h.subscribed, h.lastErr = err == nil, err
	close(h.changed)
	h.changed = make(chan struct{})
	if err == nil && !was {
		h.signalAllLocked()
	}
}

// signalAll has every waiter try once: a wake-up published while a
// subscription was down is lost.
func (h *hub) signalAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.signalAllLocked()
}

func (h *hub) signalAllLocked() {
	for _, w := range h.waiters {
		w.signal()
	}
}

func (h *hub) deliver(msg string) { h.wake([]string{msg}) }

// wake signals the waiters of this Client that the messages name ("id",
// "id token" for a direct grant, "id h<ms>" for a waiter made the head of
// its queue, whose timer is to try in ms). Unknown ids are ignored: a
// waiter that already left gave back, in its leave script, a lease
// granted to it.
func (h *hub) wake(msgs []string) {
	if len(msgs) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range msgs {
		id, token, _ := strings.Cut(m, " ")
		if w := h.waiters[id]; w != nil {
			if ms, ok := strings.CutPrefix(token, "h"); ok {
				w.madeHead(time.Duration(atoi(ms)) * time.Millisecond)
				continue
			}
			if token != "" {
				w.mu.Lock()
				// A stale message arriving late must not hide a valid one:
				// keep the higher token (tokens only grow).
				if atoi(token) > atoi(w.granted) {
					w.granted = token
				}
				w.mu.Unlock()
			}
			w.signal()
		}
	}
}

// join registers a waiter, readied on shard (see ready), before its
// first attempt, so a wake-up that arrives before the attempt's reply is
// kept. id must be unique across processes: a random lease id serves.
// The waiter leaves with leave.
func (h *hub) join(s *Semaphore, id, shard string) *waiter {
	w := &waiter{id: id, sem: s, hub: h, wake: make(chan struct{}, 1), shard: shard}
	h.mu.Lock()
	h.waiters[w.id] = w
	h.mu.Unlock()
	return w
}

// keepAlive has the Client's refresher keep the waiter's queue entry
// alive, once it is queued, until it leaves.
func (w *waiter) keepAlive() { w.hub.c.refresher.addWaiter(w) }

// leave takes the waiter out of the hub and the refresher: this Client no
// longer wakes it nor keeps its queue entry alive.
func (w *waiter) leave() {
	w.hub.c.refresher.remove(w)
	w.hub.mu.Lock()
	delete(w.hub.waiters, w.id)
	w.hub.mu.Unlock()
	if w.shard != "" {
		w.hub.shards.Drop(w.shard)
	}
}

// queued records that Redis answered a request sent at sent with the
// waiter still queued, and the last token it had issued ("": unknown, as
// a keep-alive answers).
func (w *waiter) queued(sent time.Time, lastToken string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if sent.After(w.queuedAt) {
		w.queuedAt = sent
	}
	if t, err := strconv.ParseInt(lastToken, 10, 64); err == nil && t > w.floor {
		w.floor = t
	}
}

// grant takes the token of a lease a release granted the waiter directly
// ("" if none, or if that grant is stale), with the time its Redis expiry
// is counted after.
func (w *waiter) grant() (token string, after time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	token, w.granted = w.granted, ""
	if t, err := strconv.ParseInt(token, 10, 64); err != nil || t <= w.floor {
		return "", w.queuedAt
	}
	return token, w.queuedAt
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// signal wakes the waiter to try now.
func (w *waiter) signal() {
	w.mu.Lock()
	w.tryNow = true
	w.mu.Unlock()
	w.kick()
}

// madeHead wakes the waiter, the head of its queue now, to set its timer
// for in from now.
func (w *waiter) madeHead(in time.Duration) {
	w.mu.Lock()
	w.headAt = time.Now().Add(in)
	w.mu.Unlock()
	w.kick()
}

func (w *waiter) kick() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// madeHeadOnly takes what woke the waiter: the time its timer is to try
// at when only a head notice did (ok), else it is to try now.
func (w *waiter) madeHeadOnly() (at time.Time, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok = w.headAt, !w.headAt.IsZero() && !w.tryNow
	w.headAt, w.tryNow = time.Time{}, false
	return at, ok
}
