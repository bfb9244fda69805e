package quorum

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter/internal/store"
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
	if !unreachable(err) {
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
		ctx, cancel := context.WithTimeout(context.Background(), q.cfg.NodeTimeout)
		_, err := store.Within(ctx, q.cfg.Spawn, func() (struct{}, error) { return struct{}{}, q.nodes[i].Ping(ctx) })
		cancel()
		if err == nil {
			q.health[i].down.Store(false)
			return
		}
		q.health[i].last.Store(&err)
	}
}

// unreachable tells a node that did not answer from one that answered
// with an error (a full semaphore is no error; a script's error is the
// node's answer).
func unreachable(err error) bool {
	var ne net.Error
	return err != nil && (errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, redis.ErrPoolTimeout))
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
