package limiter

import (
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter/internal/quorum"
	"github.com/redsem/redsem/limiter/internal/redisstore"
	"github.com/redsem/redsem/limiter/internal/store"
)

// NewRedlock returns a Client whose semaphores are kept on N independent
// Redis nodes (no replication between them): a lease is held while a
// quorum of the nodes hold it, and each node admits at most limit permits.
// Every method behaves as on a single node, except that waiters are not
// served in arrival order (an order per node could deadlock waiters that
// each head one node): they are woken by releases and retry, after a short
// random pause when two of them split the nodes. See QuorumError for what
// a failed quorum reports. Nodes must be distinct and non-nil; bad nodes
// or options give an *ArgumentError naming them. Nothing is sent to Redis.
//
// The quorum is ⌊N·limit/(limit+1)⌋+1 nodes: a majority for a mutex (as in
// Redlock), more for larger limits. A majority is not enough for a limit
// above 1: with 3 nodes and limit 3, four holders can each sit on two
// nodes without any node holding more than three. With this quorum, limit+1
// holders would need more than N·limit node slots. So a semaphore survives
// f failed nodes only when N >= f·(limit+1)+1: 3 nodes for a mutex with
// f=1, 4 nodes for limit 2, 5 for limit 3.
//
// A node that does not answer (refusing connections, paused, or slower
// than NodeTimeout) counts as failed, and is not asked again until a
// background PING (one per NodeTimeout) finds it back, so that a dead node
// costs the others nothing: with one of three nodes down a mutex keeps
// about its speed (docs/benchmarks-history.md). Contenders that split the nodes give
// their grants back and try again, the one that was granted the first
// node that is up at once, the others after a short random pause.
//
// A node that restarts empty grants nothing on the names it forgot for
// its RestartQuarantine (default the TTL), and a lease's refresh grants
// the lease again on a node that lost it (once a quorum confirmed it),
// so a rolling restart of the nodes keeps held leases. Set the quarantine
// to the longest TTL in use when TTLs differ.
func NewRedlock(nodes []redis.UniversalClient, opts ...Option) (*Client, error) {
	stores, err := checkNodes(nodes)
	if err != nil {
		return nil, err
	}
	return newClient(opts, func(c *Client) store.Store {
		return quorum.New(stores, quorum.Config{NodeTimeout: c.cfg.nodeWait(), Drift: c.cfg.drift, Spawn: c.spawn, Done: c.ctx.Done()})
	})
}

// checkNodes makes the store of each node, refusing nil and duplicate
// nodes.
func checkNodes(nodes []redis.UniversalClient) ([]*redisstore.Store, error) {
	if len(nodes) == 0 {
		return nil, argError("nodes", "[]", "need at least one node")
	}
	stores := make([]*redisstore.Store, len(nodes))
	for i, n := range nodes {
		if isNil(n) {
			return nil, argError("nodes", fmt.Sprintf("[%d]", i), "must not be nil")
		}
		stores[i] = redisstore.New(n, false)
		if j := slices.IndexFunc(stores[:i], func(s *redisstore.Store) bool { return s.Addr() == stores[i].Addr() }); j >= 0 {
			return nil, argError("nodes", stores[i].Addr(), fmt.Sprintf("listed twice (at %d and %d)", j, i))
		}
	}
	return stores, nil
}
