package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// downFor is how long calls to a Cluster node that did not answer
	// fail at once, without reaching it, before one call tries it again:
	// a dead master is tried about once a second per Store (go-redis may
	// retry that call up to 3 times), not by every call of every retry
	// loop (thousands a second). Its promotion is seen sooner: calls
	// refused meanwhile keep asking for the slot map (reloadEvery).
	downFor = time.Second
	// reloadEvery bounds how often a failure makes the ClusterClient read
	// its slot map again: a few times a second, so that a replica's
	// promotion is seen within a second, without flooding the nodes with
	// CLUSTER SLOTS while a master is down.
	reloadEvery = 250 * time.Millisecond
)

// nodeDown is what a Store remembers of a Cluster node that did not
// answer: until when calls to it fail at once, and why.
type nodeDown struct {
	until atomic.Int64 // unix ns
	err   atomic.Pointer[error]
}

// unreachable tracks the Cluster nodes that did not answer, by address.
// go-redis reads its slot map again on MOVED or on a timer (10 s), not
// when a master refuses connections (redis/go-redis#3979): after a master
// dies and its replica is promoted, calls would go on to the dead address
// until that timer. So a failure to reach a node asks for the map again
// (rate-limited), and the node is left alone for downFor.
type unreachable struct {
	nodes    sync.Map     // addr -> *nodeDown
	reloaded atomic.Int64 // unix ns of the last reload asked for
}

// errNodeDown wraps the last failure of a Cluster node that failed a call
// less than downFor ago: the call was not sent.
var errNodeDown = errors.New("redisstore: node did not answer recently; not tried again yet")

// admit returns nil when a call may go to addr: the node is not known to
// be down, or its quiet time is over and this call is the one that tries
// it again (the others keep failing at once until it answers).
func (u *unreachable) admit(addr string) error {
	v, ok := u.nodes.Load(addr)
	if !ok {
		return nil
	}
	d := v.(*nodeDown)
	now := time.Now().UnixNano()
	until := d.until.Load()
	if now >= until && d.until.CompareAndSwap(until, now+downFor.Nanoseconds()) {
		return nil
	}
	return fmt.Errorf("%w: %s: %w", errNodeDown, addr, *d.err.Load())
}

// observe records how a call to addr went (err, under ctx): a node that
// answered is forgotten; one that did not is left alone for downFor, and
// the slot map is read again, since another node may serve its slots now.
func (u *unreachable) observe(ctx context.Context, addr string, err error, reload func(context.Context)) {
	if !isUnreachable(ctx, err) {
		switch {
		case err == nil || isReply(err):
			u.answered(addr)
		case ctx.Err() != nil && !errors.Is(err, errNodeDown):
			u.tryAgain(addr) // this try told nothing: the next call may try
		}
		return
	}
	v, _ := u.nodes.LoadOrStore(addr, new(nodeDown))
	d := v.(*nodeDown)
	d.err.Store(&err)
	d.until.Store(time.Now().Add(downFor).UnixNano())
	u.reload(reload)
}

// tryAgain lets the next call to addr, if it is down, try it.
func (u *unreachable) tryAgain(addr string) {
	if v, ok := u.nodes.Load(addr); ok {
		v.(*nodeDown).until.Store(0)
	}
}

// answered forgets addr: Load first, since Delete may lock and nearly
// every call answers.
func (u *unreachable) answered(addr string) {
	if _, ok := u.nodes.Load(addr); ok {
		u.nodes.Delete(addr)
	}
}

// reload asks for the slot map at most every reloadEvery. ReloadState
// reloads in the background, so no caller waits for it.
func (u *unreachable) reload(reload func(context.Context)) {
	now := time.Now().UnixNano()
	last := u.reloaded.Load()
	if now-last >= reloadEvery.Nanoseconds() && u.reloaded.CompareAndSwap(last, now) {
		reload(context.Background())
	}
}

// isUnreachable: the node did not answer a call we made (Unanswered),
// while the caller still waited: not its own context ending, and not a
// call refused here without being sent (errNodeDown).
func isUnreachable(ctx context.Context, err error) bool {
	return ctx.Err() == nil && !errors.Is(err, errNodeDown) && Unanswered(err)
}

// Unanswered reports whether err says a node did not answer (refused,
// reset, closed, timed out: the network's failures, and a deadline), as
// opposed to answering with an error: the one test of it that the
// Cluster's fail-fast, the quorum's node health and the eviction check
// share. Not redis.ErrPoolTimeout: this process's own pool ran dry (WAITs
// holding connections, say), which says nothing of the node.
func Unanswered(err error) bool {
	var ne net.Error
	return err != nil && (errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrClosed))
}

// isReply: err is the server's error reply, so the node answered.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// clusterAddr returns the address of the Cluster master serving key, ""
// on any other client (or when the slot map has no master for it yet),
// where nothing is tracked.
func (s *Store) clusterAddr(ctx context.Context, key string) string {
	if s.dep.reload == nil {
		return ""
	}
	node, err := s.dep.nodeFor(ctx, key)
	if err != nil {
		return ""
	}
	return node.Options().Addr
}

// admit: see unreachable.admit; every call to addr "" goes. A call
// refused asks for the slot map again (at most every reloadEvery): the
// slots of the node may have moved to its promoted replica.
func (s *Store) admit(addr string) error {
	if addr == "" {
		return nil
	}
	err := s.down.admit(addr)
	if err != nil {
		s.down.reload(s.dep.reload)
	}
	return err
}

// observe: see unreachable.observe; nothing is tracked for addr "".
func (s *Store) observe(ctx context.Context, addr string, err error) {
	if addr != "" {
		s.down.observe(ctx, addr, err, s.dep.reload)
	}
}
