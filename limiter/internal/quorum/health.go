package quorum

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redsem/redsem/limiter/internal/redisstore"
)

// health is what a quorum knows of one node's reachability. A node that
// did not answer (refused, timed out, closed) is down: calls skip it,
// answering at once with downError, so that a dead node sets the pace of
// nothing, and a probe finds out in the background when it is back.
// Skipping a node is as safe as its failing: each node enforces the limit
// on its own, and a quorum is counted from the nodes that granted.
type health struct {
	down atomic.Bool
	last atomic.Pointer[error] // why it went down
	// undos are the give-backs (releaseOn) meant for the node while it
	// was down: a paused node runs the grants queued before its pause
	// when it resumes, so they are sent once its probe finds it back.
	mu    sync.Mutex
	undos []func()
}

// downError answers for a node marked down, wrapping why it went down.
type downError struct {
	addr string
	err  error
}

func (e *downError) Error() string {
	return fmt.Sprintf("%s is down (probed in the background): %v", e.addr, e.err)
}

func (e *downError) Unwrap() error { return e.err }

// skip returns the error a call to node i answers at once, or nil when
// the node is to be asked.
func (q *Store) skip(i int) error {
	h := &q.health[i]
	if !h.down.Load() {
		return nil
	}
	err := errors.New("unreachable")
	if last := h.last.Load(); last != nil {
		err = *last
	}
	return &downError{addr: q.nodes[i].Addr(), err: err}
}

// heard notes node i's answer to a call: one that did not reach it marks
// it down and starts its probe.
func (q *Store) heard(i int, err error) {
	if !redisstore.Unanswered(err) {
		return
	}
	h := &q.health[i]
	h.last.Store(&err)
	if h.down.Swap(true) {
		return // its probe runs
	}
	q.cfg.Spawn(func() { q.probe(i) })
}

// probe PINGs node i every NodeTimeout until it answers, then marks it
// up; it ends with the Client.
func (q *Store) probe(i int) {
	t := time.NewTicker(max(q.cfg.NodeTimeout, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-q.cfg.Done:
			return
		case <-t.C:
		}
		// On this goroutine, not abandoned at NodeTimeout: pings do not
		// pile up on a node that is silent (without ContextTimeoutEnabled
		// one waits for go-redis' ReadTimeout).
		ctx, cancel := context.WithTimeout(context.Background(), q.cfg.NodeTimeout)
		err := q.nodes[i].Ping(ctx)
		cancel()
		if err == nil {
			q.health[i].down.Store(false)
			q.replayUndos(i)
			return
		}
		q.health[i].last.Store(&err)
	}
}

// firstUp is the lowest node that is not marked down (-1: none).
func (q *Store) firstUp() int {
	for i := range q.health {
		if !q.health[i].down.Load() {
			return i
		}
	}
	return -1
}

// deferUndo keeps undo for node i, down, until its probe finds it back.
func (q *Store) deferUndo(i int, undo func()) {
	h := &q.health[i]
	h.mu.Lock()
	defer h.mu.Unlock()
	h.undos = append(h.undos, undo)
}

func (q *Store) replayUndos(i int) {
	h := &q.health[i]
	h.mu.Lock()
	undos := h.undos
	h.undos = nil
	h.mu.Unlock()
	for _, undo := range undos {
		undo()
	}
}

// reached reports whether a call that failed with err may have run on its
// node: one skipped as down (downError) was never sent, and has nothing
// to undo.
func reached(err error) bool { return !errors.As(err, new(*downError)) }
