// Package quorum keeps leases on N independent Redis nodes (Redlock): a
// lease is held while a quorum of the nodes hold it, and each node admits
// at most the limit. Every node is an redisstore.Store running the same scripts;
// this package only asks them in parallel, counts their answers, agrees
// on one fencing token, and rolls back what a failed attempt left.
package quorum

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redsem/redsem/limiter/internal/redisstore"
	"github.com/redsem/redsem/limiter/internal/store"
)

// Size is the fewest nodes a lease must be on so that no limit+1 permits
// can be held: any limit+1 leases on q nodes each need (limit+1)·q >
// N·limit node slots, more than the nodes admit.
func Size(nodes int, limit int64) int {
	return int(int64(nodes)*limit/(limit+1)) + 1
}

// Config is what a quorum takes from its Client.
type Config struct {
	// NodeTimeout bounds each node's answer.
	NodeTimeout time.Duration
	// Drift is how much earlier than Redis a holder considers a lease of
	// that TTL over.
	Drift func(ttl time.Duration) time.Duration
	// Spawn runs a goroutine its Client waits for when it closes.
	Spawn func(func())
	// Done is closed when the Client closes: the probes of nodes found
	// down end then.
	Done <-chan struct{}
}

// Store runs the same scripts on every node and counts answers.
type Store struct {
	nodes     []*redisstore.Store
	health    []health // per node
	cfg       Config
	lastToken atomic.Int64 // highest token seen, so proposals only grow
	// regaining holds the leases (keyspace id, lease id) with a regain in
	// flight: one at a time each.
	regaining sync.Map
	// now is the clock proposals come from (a test shifts it); the nodes
	// accept a proposal only near their own clocks (next_token).
	now func() time.Time
}

var _ store.Store = (*Store)(nil)

// New returns the quorum of nodes, which must be distinct.
func New(nodes []*redisstore.Store, cfg Config) *Store {
	return &Store{nodes: nodes, health: make([]health, len(nodes)), cfg: cfg, now: time.Now}
}

// ShiftClock makes the Store propose tokens from a clock off by d, as a
// client on a machine with a wrong clock would (a test hook).
func (q *Store) ShiftClock(d time.Duration) {
	q.now = func() time.Time { return time.Now().Add(d) }
}

// proposal is the token this Client proposes to the nodes: its clock, or
// above every token it saw.
func (q *Store) proposal() string {
	return strconv.FormatInt(max(q.now().UnixMicro(), q.lastToken.Load()+1), 10)
}

func (q *Store) quorum(k store.Keyspace) int { return Size(len(q.nodes), k.Limit) }

// GrantsDirectly: nodes that may disagree on the order only wake waiters.
func (q *Store) GrantsDirectly() bool { return false }

// BoundedByCtx: gather stops waiting for the nodes when ctx ends.
func (q *Store) BoundedByCtx() bool { return true }

// CanWait rejects WaitReplicas: a quorum's nodes are independent masters,
// and a failover of one is what the quorum is for.
func (q *Store) CanWait(w store.ReplicaWait) error {
	if w.On() {
		return errNoReplicas
	}
	return nil
}

// nodeAnswer is one node's answer to a quorum call.
type nodeAnswer[T any] struct {
	i   int
	v   T
	err error
}

// gather asks the given nodes (nil: all) in parallel and hands their
// answers to decide as they arrive, until decide returns true, every node
// answered, or ctx ends: a stopped node must not make every call wait out
// its timeout. A node known to be down is not asked: it answers at once
// with its downError (see health). Each node call is bounded by the node
// timeout but not cancelled with ctx, so what was started finishes;
// answers that come after gather returned go to late (if not nil), in the
// background.
func gather[T any](ctx context.Context, q *Store, nodes []int, ask func(ctx context.Context, i int, n *redisstore.Store) (T, error),
	decide func(a nodeAnswer[T]) bool, late func(a nodeAnswer[T])) {
	if nodes == nil {
		nodes = all(len(q.nodes))
	}
	answers := make(chan nodeAnswer[T], len(nodes))
	for _, i := range nodes {
		if err := q.skip(i); err != nil {
			answers <- nodeAnswer[T]{i: i, err: err}
			continue
		}
		q.cfg.Spawn(func() {
			nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.cfg.NodeTimeout)
			defer cancel()
			v, err := store.Within(nctx, q.cfg.Spawn, func() (T, error) { return ask(nctx, i, q.nodes[i]) })
			q.heard(i, err)
			answers <- nodeAnswer[T]{i: i, v: v, err: err}
		})
	}
	rest := len(nodes)
	defer func() {
		if rest > 0 && late != nil {
			q.cfg.Spawn(func() {
				for range rest {
					late(<-answers)
				}
			})
		}
	}()
	for rest > 0 {
		select {
		case a := <-answers:
			rest--
			if decide(a) {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

func all(n int) []int {
	nodes := make([]int, n)
	for i := range nodes {
		nodes[i] = i
	}
	return nodes
}

func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}
