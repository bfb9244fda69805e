package limiter

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"
)

// hub delivers wake-ups to this Client's waiters. A release in any process
// publishes the ids of the queued waiters it now has room for on the wake
// channel of each one's Client, so a Client needs one subscription (one
// connection per node) whatever the number of names it waits on, and a
// release wakes only those who can now be granted. A message "id token"
// says the release granted the waiter its lease (a direct grant).
type hub struct {
	c *Client

	mu         sync.Mutex
	waiters    map[string]*waiter
	started    bool
	subscribed bool          // the subscription is live now
	lastErr    error         // why the last subscription attempt failed
	changed    chan struct{} // closed and replaced on every attempt's outcome
}

// waiter is one Acquire waiting in a queue.
type waiter struct {
	id   string // its queue entry, unique across processes
	sem  *Semaphore
	hub  *hub
	wake chan struct{}

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
}

func newHub(c *Client) *hub {
	return &hub{c: c, waiters: map[string]*waiter{}, changed: make(chan struct{})}
}

// ready returns once the wake channel is subscribed: no wake-up published
// after that can be missed. It starts the subscription on first use and
// returns the error of the next attempt when it is down.
func (h *hub) ready(ctx context.Context) error {
	h.mu.Lock()
	if h.subscribed {
		h.mu.Unlock()
		return nil
	}
	if !h.started {
		h.started = true
		h.c.spawn(func() { h.c.st.Listen(h.c.ctx, h.c.channel, h.deliver, h.outcome) })
	}
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
		for _, w := range h.waiters {
			w.signal()
		}
	}
}

func (h *hub) deliver(msg string) { h.wake([]string{msg}) }

// wake signals the waiters of this Client that the messages name ("id",
// or "id token" for a direct grant). Unknown ids are ignored: a waiter
// that already left gave back, in its leave script, a lease granted to it.
func (h *hub) wake(msgs []string) {
	if len(msgs) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range msgs {
		id, token, _ := strings.Cut(m, " ")
		if w := h.waiters[id]; w != nil {
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

// join registers a waiter before its first attempt, so a wake-up that
// arrives before the attempt's reply is kept. id must be unique across
// processes: a random lease id serves. The waiter leaves with leave.
func (h *hub) join(s *Semaphore, id string) *waiter {
	w := &waiter{id: id, sem: s, hub: h, wake: make(chan struct{}, 1)}
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

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
