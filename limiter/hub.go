package limiter

import (
	"container/list"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// subscriptionLinger keeps a subscription open this long after its last
// waiter left, so a semaphore under steady contention subscribes once, not
// once per wait.
const subscriptionLinger = 30 * time.Second

// hub shares one subscription per wake channel among all local waiters of
// a store, and wakes only as many of them as a release freed permits for.
type hub struct {
	st     store
	origin string // names this hub in wake messages
	mu     sync.Mutex
	topics map[string]*topic
}

type topic struct {
	channel string
	recent  [16]string // last releases seen, to drop a quorum's repeats
	next    int
	waiters list.List     // of *waiter, in arrival order
	ready   chan struct{} // closed once the subscription is confirmed or failed
	sub     subscription
	err     error
	idle    *time.Timer
}

type waiter struct {
	h      *hub
	t      *topic
	el     *list.Element
	weight int64
	wake   chan struct{}
}

func newHub(st store) *hub {
	return &hub{st: st, origin: uuid.NewString(), topics: map[string]*topic{}}
}

// join registers a waiter before its next attempt, so no release between
// that attempt and the wait can be missed. It returns once the channel's
// subscription is confirmed.
func (h *hub) join(ctx context.Context, channel string, weight int64) (*waiter, error) {
	h.mu.Lock()
	t := h.topics[channel]
	if t == nil {
		t = &topic{channel: channel, ready: make(chan struct{})}
		h.topics[channel] = t
		go h.open(t)
	}
	w := h.enqueueLocked(t, weight)
	h.mu.Unlock()

	select {
	case <-t.ready:
	case <-ctx.Done():
		w.leave()
		return nil, context.Cause(ctx)
	}
	if t.err != nil {
		w.leave()
		return nil, t.err
	}
	return w, nil
}

// joinOpen registers a waiter only if the channel's subscription is
// already confirmed (no round trip), and says how many local waiters ahead
// of it could use the permits it would take (those no heavier than it: a
// heavier one waiting does not stop a lighter one from trying). It
// returns nil when there is no such subscription.
func (h *hub) joinOpen(channel string, weight int64) (*waiter, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[channel]
	if t == nil || t.sub == nil {
		return nil, 0
	}
	ahead := 0
	for e := t.waiters.Front(); e != nil; e = e.Next() {
		if e.Value.(*waiter).weight <= weight {
			ahead++
		}
	}
	return h.enqueueLocked(t, weight), ahead
}

// enqueueLocked puts a new waiter at the back of t's queue and keeps the
// subscription from lingering out.
func (h *hub) enqueueLocked(t *topic, weight int64) *waiter {
	if t.idle != nil {
		t.idle.Stop()
		t.idle = nil
	}
	w := &waiter{h: h, t: t, weight: weight, wake: make(chan struct{}, 1)}
	w.el = t.waiters.PushBack(w)
	return w
}

func (h *hub) open(t *topic) {
	// Not tied to any waiter's context: the subscription outlives them.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	sub, err := h.st.subscribe(ctx, t.channel)
	cancel()
	h.mu.Lock()
	t.sub, t.err = sub, err
	if err != nil {
		delete(h.topics, t.channel) // the next waiter tries again
	} else if t.waiters.Len() == 0 {
		h.lingerLocked(t)
	}
	close(t.ready)
	h.mu.Unlock()
	if err == nil {
		h.dispatch(t)
	}
}

// dispatch handles wake messages "<permits freed>:<origin>:<token>".
// Releases by this process were handled when they happened; every node of
// a quorum announces the same release, and only the first counts.
func (h *hub) dispatch(t *topic) {
	for msg := range t.sub.messages() {
		n, release, _ := strings.Cut(msg.Payload, ":")
		if origin, _, _ := strings.Cut(release, ":"); origin == h.origin {
			continue
		}
		freed, err := strconv.ParseInt(n, 10, 64)
		if err != nil || freed < 1 {
			freed = 1
		}
		h.mu.Lock()
		if !slices.Contains(t.recent[:], release) {
			t.recent[t.next] = release
			t.next = (t.next + 1) % len(t.recent)
			h.wakeLocked(t, freed)
		}
		h.mu.Unlock()
	}
}

// wake wakes local waiters of channel for freed permits.
func (h *hub) wake(channel string, freed int64) {
	h.mu.Lock()
	if t := h.topics[channel]; t != nil {
		h.wakeLocked(t, freed)
	}
	h.mu.Unlock()
}

// wakeLocked wakes, in arrival order, the waiters whose weights fit in the
// freed permits, and at least the first waiter.
func (h *hub) wakeLocked(t *topic, freed int64) {
	woken := false
	for e := t.waiters.Front(); e != nil && freed > 0; e = e.Next() {
		w := e.Value.(*waiter)
		if w.weight <= freed {
			w.signal()
			freed -= w.weight
			woken = true
		}
	}
	if !woken && t.waiters.Len() > 0 {
		t.waiters.Front().Value.(*waiter).signal()
	}
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// leave unregisters the waiter; safe to call on a nil waiter.
func (w *waiter) leave() {
	if w == nil {
		return
	}
	h, t := w.h, w.t
	h.mu.Lock()
	t.waiters.Remove(w.el)
	select {
	case <-w.wake:
		// Woken but leaving (it acquired, or gave up): the permits it
		// was woken for may be free, so wake the next in line instead.
		h.wakeLocked(t, w.weight)
	default:
	}
	if t.waiters.Len() == 0 && t.sub != nil {
		h.lingerLocked(t)
	}
	h.mu.Unlock()
}

func (h *hub) lingerLocked(t *topic) {
	if t.idle != nil {
		return
	}
	t.idle = time.AfterFunc(subscriptionLinger, func() {
		h.mu.Lock()
		unused := t.waiters.Len() == 0 && h.topics[t.channel] == t
		if unused {
			delete(h.topics, t.channel)
		}
		h.mu.Unlock()
		if unused {
			t.sub.close()
		}
	})
}
