package limiter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
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
// A node that restarts empty grants nothing on the names it forgot for
// its RestartQuarantine (default the TTL), and a lease's refresh grants
// the lease again on a node that lost it (once a quorum confirmed it),
// so a rolling restart of the nodes keeps held leases. Set the quarantine
// to the longest TTL in use when TTLs differ.
func NewRedlock(nodes []redis.UniversalClient, opts ...Option) (*Client, error) {
	addrs, err := checkNodes(nodes)
	if err != nil {
		return nil, err
	}
	var c *Client
	c, err = newClient(opts, func(cfg *config) store {
		return newQuorumStore(nodes, addrs, cfg, func(fn func()) { c.spawn(fn) })
	})
	return c, err
}

// quorumSize is the fewest nodes a lease must be on so that no limit+1
// permits can be held: any limit+1 leases on q nodes each need
// (limit+1)·q > N·limit node slots, more than the nodes admit.
func quorumSize(nodes int, limit int64) int {
	return int(int64(nodes)*limit/(limit+1)) + 1
}

func checkNodes(nodes []redis.UniversalClient) ([]string, error) {
	if len(nodes) == 0 {
		return nil, argError("nodes", "[]", "need at least one node")
	}
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		if isNil(n) {
			return nil, argError("nodes", fmt.Sprintf("[%d]", i), "must not be nil")
		}
		addrs[i] = nodeAddr(n)
		if j := slices.Index(addrs[:i], addrs[i]); j >= 0 {
			return nil, argError("nodes", addrs[i], fmt.Sprintf("listed twice (at %d and %d)", j, i))
		}
	}
	return addrs, nil
}

// nodeAddr names a node in errors and detects duplicates.
func nodeAddr(n redis.UniversalClient) string {
	switch c := n.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		addrs := slices.Clone(c.Options().Addrs)
		slices.Sort(addrs)
		return "cluster(" + strings.Join(addrs, ",") + ")"
	}
	return fmt.Sprintf("%T(%p)", n, n)
}

// quorumStore runs the same scripts on every node and counts answers.
type quorumStore struct {
	nodes       []*redisStore
	addrs       []string
	nodeTimeout time.Duration
	cfg         *config
	spawn       func(func())
	lastToken   atomic.Int64 // highest token seen, so proposals only grow
	// regaining holds the leases (keyspace id, lease id) with a regain
	// in flight: one at a time each.
	regaining sync.Map
	// now is the clock proposals come from (a test shifts it); the nodes
	// accept a proposal only near their own clocks (next_token).
	now func() time.Time
}

func newQuorumStore(nodes []redis.UniversalClient, addrs []string, cfg *config, spawn func(func())) *quorumStore {
	q := &quorumStore{addrs: addrs, nodeTimeout: cfg.nodeWait(), cfg: cfg, spawn: spawn, now: time.Now}
	for _, n := range nodes {
		q.nodes = append(q.nodes, newRedisStore(n, false))
	}
	return q
}

// proposal is the token this Client proposes to the nodes: its clock, or
// above every token it saw.
func (q *quorumStore) proposal() string {
	return strconv.FormatInt(max(q.now().UnixMicro(), q.lastToken.Load()+1), 10)
}

func (q *quorumStore) quorum(k keyspace) int { return quorumSize(len(q.nodes), k.limit) }

// nodeAnswer is one node's answer to a quorum call.
type nodeAnswer[T any] struct {
	i   int
	v   T
	err error
}

// gather asks the given nodes (nil: all) in parallel and hands their
// answers to decide as they arrive, until decide returns true, every node
// answered, or ctx ends: a stopped node must not make every call wait out
// its timeout. Each node call is bounded by the node timeout but not
// cancelled with ctx, so what was started finishes; answers that come
// after gather returned go to late (if not nil), in the background.
func gather[T any](ctx context.Context, q *quorumStore, nodes []int, ask func(ctx context.Context, i int, n *redisStore) (T, error),
	decide func(a nodeAnswer[T]) bool, late func(a nodeAnswer[T])) {
	if nodes == nil {
		nodes = make([]int, len(q.nodes))
		for i := range nodes {
			nodes[i] = i
		}
	}
	answers := make(chan nodeAnswer[T], len(nodes))
	for _, i := range nodes {
		q.spawn(func() {
			nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.nodeTimeout)
			defer cancel()
			v, err := within(nctx, q.spawn, func() (T, error) { return ask(nctx, i, q.nodes[i]) })
			answers <- nodeAnswer[T]{i: i, v: v, err: err}
		})
	}
	rest := len(nodes)
	defer func() {
		if rest > 0 && late != nil {
			q.spawn(func() {
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

func (q *quorumStore) acquire(ctx context.Context, k keyspace, r acquireRequest) (result acquireReply, _ error) {
	start := time.Now()
	quorum := q.quorum(k)
	r.proposed = q.proposal()
	n := len(q.nodes)
	replies := make([]acquireReply, n)
	defer func() {
		// Whatever the outcome, a node that took our waiter out of its
		// queue woke those behind it; this Client's own are woken by us.
		for _, rep := range replies {
			result.woken = union(result.woken, rep.woken)
		}
	}()
	errs := make([]error, n)
	var granted, busy, failed []int
	gather(ctx, q, nil, func(ctx context.Context, _ int, node *redisStore) (acquireReply, error) {
		return node.acquire(ctx, k, r)
	}, func(a nodeAnswer[acquireReply]) bool {
		replies[a.i], errs[a.i] = a.v, a.err
		switch {
		case a.err != nil:
			failed = append(failed, a.i)
		case a.v.granted:
			granted = append(granted, a.i)
		default:
			busy = append(busy, a.i)
		}
		// Stop early only when enough nodes are full to rule out a
		// quorum. A grant is waited for on every node: returning at a
		// quorum would let a slow node's grant land after the lease was
		// released, holding a permit there until the TTL. With failures,
		// every node is heard so the error names them.
		return len(busy) > n-quorum
	}, func(a nodeAnswer[acquireReply]) {
		// A grant after the outcome is given back, by its own token so
		// that no later attempt with the same id is touched (a lease the
		// id already held stays with its holder). (Kept for an
		// attempt that won, it would outlive a release that came first;
		// the lease's next refresh grants it there again: regain.)
		if a.err == nil && a.v.granted && !a.v.existed {
			q.releaseOn(k, r.id, map[int]string{a.i: a.v.token})
		}
	})
	for _, i := range busy {
		if replies[i].heldWeight > 0 {
			return replies[i], nil
		}
	}
	validity := r.ttl - time.Since(start) - q.cfg.drift(r.ttl)
	// The nodes that took the quorum's token hold the attempt's lease
	// under it: a rollback must name that one.
	retokened := map[int]string{}
	if len(granted) >= quorum && validity > 0 {
		token, differ := quorumToken(replies, granted)
		tok := strconv.FormatInt(token, 10)
		written := q.setToken(k, r.id, tok, differ)
		for _, i := range written {
			retokened[i] = tok
		}
		if len(granted)-len(differ)+len(written) >= quorum {
			q.raiseToken(token)
			if r.wait != "" && len(busy) > 0 {
				// The nodes that were full queued the waiter; a queue entry
				// left there would take up the room of real waiters.
				q.spawn(func() {
					gather(context.Background(), q, busy, func(ctx context.Context, _ int, n *redisStore) ([]string, error) {
						return n.leave(ctx, k, r.wait, r.channel)
					}, func(nodeAnswer[[]string]) bool { return false }, nil)
				})
			}
			rep := acquireReply{granted: true, token: tok, weight: replies[granted[0]].weight, free: replies[granted[0]].free}
			for _, i := range granted {
				rep.free = min(rep.free, replies[i].free)
			}
			return rep, nil
		}
	}
	// No quorum: give back the leases this attempt created (by their own
	// tokens; a lease the id already held stays with its holder), and, for
	// a random id, what a node may have granted with its reply lost.
	undo := map[int]string{}
	for _, i := range granted {
		if !replies[i].existed {
			undo[i] = cmp.Or(retokened[i], replies[i].token)
		}
	}
	if !r.idGiven {
		for _, i := range failed {
			undo[i] = ""
		}
	}
	q.releaseOn(k, r.id, undo)
	if ctx.Err() != nil {
		return acquireReply{}, context.Cause(ctx)
	}
	if len(failed) <= n-quorum {
		// Failures alone do not rule out a quorum: the semaphore is full
		// (or we were too slow for the TTL); wait as on a single node,
		// on a timer too, since nodes do not queue in order.
		rep := acquireReply{head: true}
		for i, b := range busy {
			if i == 0 || replies[b].retryIn < rep.retryIn {
				rep.retryIn = replies[b].retryIn
			}
			rep.inUse = max(rep.inUse, replies[b].inUse)
			rep.restarted = rep.restarted || replies[b].restarted
		}
		if len(granted) > 0 {
			// Contenders split the nodes and each gave its part back,
			// silently: try again after a short random pause, so that
			// one of them wins next time.
			rep.retryIn = min(rep.retryIn, q.nodeTimeout/2+rand.N(q.nodeTimeout+time.Millisecond))
		}
		return rep, nil
	}
	return acquireReply{}, q.quorumError(quorum, "acquire", len(granted), busy, errs)
}

// quorumToken picks the lease's token: that of a lease the id already held
// (its holder knows that token), else the highest granted. differ maps
// the granting nodes that hold another token to theirs.
func quorumToken(replies []acquireReply, granted []int) (token int64, differ map[int]string) {
	existing := false
	for _, i := range granted {
		t, _ := strconv.ParseInt(replies[i].token, 10, 64)
		switch {
		case replies[i].existed && (!existing || t > token):
			token, existing = t, true
		case !existing && t > token:
			token = t
		}
	}
	differ = map[int]string{}
	for _, i := range granted {
		if replies[i].token != strconv.FormatInt(token, 10) {
			differ[i] = replies[i].token
		}
	}
	return token, differ
}

// setToken gives the lease on the nodes of own (node -> the token that
// node granted) the quorum's token (the write-back), and returns the nodes
// that took it. A node whose write-back failed gives its grant back, by
// its own token, in the background: left there, it was a permit nobody
// refreshes until the TTL (and if the write-back did land, its reply
// lost, the token no longer matches and nothing is removed). The lease's
// next refresh grants it there again (regain).
func (q *quorumStore) setToken(k keyspace, id, token string, own map[int]string) (written []int) {
	if len(own) == 0 {
		return nil
	}
	nodes := make([]int, 0, len(own))
	for i := range own {
		nodes = append(nodes, i)
	}
	orphans := map[int]string{}
	gather(context.Background(), q, nodes, func(ctx context.Context, i int, n *redisStore) (int64, error) {
		return setTokenScript.Run(ctx, n.rdb, k.keys, id, token, own[i]).Int64()
	}, func(a nodeAnswer[int64]) bool {
		if a.err == nil && a.v == 1 {
			written = append(written, a.i)
		} else {
			orphans[a.i] = own[a.i]
		}
		return false
	}, nil)
	if len(orphans) > 0 {
		q.spawn(func() { q.releaseOn(k, id, orphans) })
	}
	return written
}

func (q *quorumStore) raiseToken(t int64) {
	for {
		cur := q.lastToken.Load()
		if t <= cur || q.lastToken.CompareAndSwap(cur, t) {
			return
		}
	}
}

// releaseOn removes this process's own attempt from the nodes given as
// node -> token ("" = any), waking nobody: a failed attempt freed nothing
// anyone waited for, and a wake-up would make waiters retry in a loop. It
// waits for the nodes that answer and leaves the silent ones to finish in
// the background.
func (q *quorumStore) releaseOn(k keyspace, id string, tokens map[int]string) {
	if len(tokens) == 0 {
		return
	}
	nodes := make([]int, 0, len(tokens))
	for i := range tokens {
		nodes = append(nodes, i)
	}
	pending := len(nodes)
	gather(context.Background(), q, nodes, func(ctx context.Context, i int, n *redisStore) (releaseReply, error) {
		return n.release(ctx, k, releaseRequest{id: id, token: tokens[i]})
	}, func(a nodeAnswer[releaseReply]) bool {
		if a.err == nil {
			pending--
		}
		return pending == 0
	}, nil)
}

func (q *quorumStore) refresh(ctx context.Context, batches []refreshBatch) []refreshResult {
	n := len(q.nodes)
	out := make([]refreshResult, len(batches))
	type tally struct {
		heldOn [][]int // per lease, the nodes that kept it
		goneOn [][]int // per lease, the nodes that answered it is not there
		errs   [][]error
		waits  []int64
	}
	tallies := make([]tally, len(batches))
	for b, batch := range batches {
		t := &tallies[b]
		t.heldOn, t.goneOn = make([][]int, len(batch.leases)), make([][]int, len(batch.leases))
		t.errs = make([][]error, len(batch.leases))
		for j := range t.errs {
			t.errs[j] = make([]error, n)
		}
		t.waits = make([]int64, len(batch.waits))
	}
	answered := 0
	gather(ctx, q, nil, func(ctx context.Context, _ int, node *redisStore) ([]refreshResult, error) {
		return node.refresh(ctx, batches), nil
	}, func(a nodeAnswer[[]refreshResult]) bool {
		for b := range batches {
			t := &tallies[b]
			var res refreshResult
			if a.err != nil {
				res.err = a.err
			} else {
				res = a.v[b]
			}
			for j := range batches[b].leases {
				switch {
				case res.err != nil:
					t.errs[j][a.i] = res.err
				case j < len(res.held) && res.held[j]:
					t.heldOn[j] = append(t.heldOn[j], a.i)
				default:
					t.goneOn[j] = append(t.goneOn[j], a.i)
				}
			}
			for j := range batches[b].waits {
				if res.err == nil && j < len(res.waits) {
					t.waits[j] = max(t.waits[j], res.waits[j])
				}
			}
		}
		answered++
		return answered == n
	}, nil)
	for b, batch := range batches {
		t := &tallies[b]
		quorum := q.quorum(batch.keys)
		out[b].waits = t.waits
		for j := range batch.leases {
			switch {
			case len(t.heldOn[j]) >= quorum:
				out[b].held = append(out[b].held, true)
				if len(t.goneOn[j]) > 0 {
					q.regain(batch.keys, batch.leases[j], t.goneOn[j])
				}
			case len(t.goneOn[j]) > n-quorum:
				out[b].held = append(out[b].held, false) // a quorum can no longer hold it
				// The nodes that just extended it (a regain's, say) would
				// keep it for nobody until the TTL.
				if len(t.heldOn[j]) > 0 {
					it := batch.leases[j]
					keep := map[int]string{}
					for _, i := range t.heldOn[j] {
						keep[i] = it.token
					}
					q.spawn(func() { q.releaseOn(batch.keys, it.id, keep) })
				}
			default:
				out[b].err = q.quorumError(quorum, "refresh", len(t.heldOn[j]), nil, t.errs[j])
			}
		}
		if out[b].err != nil {
			out[b].held = nil
		}
	}
	return out
}

// regain grants a lease that a quorum still holds again on the nodes that
// lost it (one restarted empty, or one whose write-back failed), as a
// fresh acquisition there: within the node's limit and restart
// quarantine, and under the lease's own token. Without it each node
// failure used up the lease's fault tolerance for the rest of its life,
// and a rolling restart of the nodes lost every long-held lease. Only a
// lease a quorum confirmed is regained: one a quorum lost (released,
// handed on, expired) is over. A node that refuses (full, in quarantine,
// or holding the id under another token: a newer lease of the same id,
// never to be touched) or fails is tried again at a later refresh.
//
// It runs in the background, one at a time per lease, so that a slow node
// holds up neither the refresh nor the other leases. The holder may
// release the lease, or hand it on, meanwhile: both mark the lease before
// they touch Redis, so a grant that landed after their script on a node
// is seen here, and given back by its token.
func (q *quorumStore) regain(k keyspace, it refreshItem, nodes []int) {
	key := k.id() + " " + it.id
	if _, busy := q.regaining.LoadOrStore(key, struct{}{}); busy {
		return
	}
	q.spawn(func() {
		defer q.regaining.Delete(key)
		r := acquireRequest{limit: k.limit, weight: it.weight, ttl: it.ttl, id: it.id, idGiven: true,
			proposed: it.token, exactToken: true, owner: it.owner, quarantine: it.quarantine}
		// What may hold the lease now: the grants, and the nodes whose
		// answer failed (the script may still run there).
		maybe := map[int]string{}
		gather(context.Background(), q, nodes, func(ctx context.Context, _ int, n *redisStore) (acquireReply, error) {
			return n.acquire(ctx, k, r)
		}, func(a nodeAnswer[acquireReply]) bool {
			if a.err != nil || (a.v.granted && !a.v.existed) {
				maybe[a.i] = it.token
			}
			return false
		}, nil)
		if it.givenUp() {
			q.releaseOn(k, it.id, maybe)
		}
	})
}

// release returns once a quorum answered; the other nodes finish (or let
// the lease expire) in the background.
func (q *quorumStore) release(ctx context.Context, k keyspace, r releaseRequest) (releaseReply, error) {
	quorum := q.quorum(k)
	errs := make([]error, len(q.nodes))
	var rep releaseReply
	answered, failed := 0, 0
	gather(ctx, q, nil, func(ctx context.Context, _ int, n *redisStore) (releaseReply, error) {
		return n.release(ctx, k, r)
	}, func(a nodeAnswer[releaseReply]) bool {
		errs[a.i] = a.err
		if a.err != nil {
			failed++
		} else {
			answered++
			rep.freed = max(rep.freed, a.v.freed)
			rep.woken = union(rep.woken, a.v.woken)
		}
		return answered >= quorum || failed > len(q.nodes)-quorum
	}, nil)
	if rep.freed > 0 || answered >= quorum {
		return rep, nil
	}
	return rep, q.quorumError(quorum, "release", answered, nil, errs)
}

func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}

// resume hands the lease over on every node that holds it with the
// ticket's token; it needs a quorum, and the quorum's token is the highest
// granted, written back where it differs.
func (q *quorumStore) resume(ctx context.Context, k keyspace, r resumeRequest) (acquireReply, error) {
	quorum := q.quorum(k)
	r.proposed = q.proposal()
	replies := make([]acquireReply, len(q.nodes))
	errs := make([]error, len(q.nodes))
	var granted []int
	gather(ctx, q, nil, func(ctx context.Context, _ int, n *redisStore) (acquireReply, error) {
		return n.resume(ctx, k, r)
	}, func(a nodeAnswer[acquireReply]) bool {
		replies[a.i], errs[a.i] = a.v, a.err
		if a.err == nil && a.v.granted {
			granted = append(granted, a.i)
		}
		return false
	}, nil)
	if len(granted) < quorum {
		failed := 0
		for _, err := range errs {
			if err != nil {
				failed++
			}
		}
		if len(granted)+failed >= quorum {
			return acquireReply{}, q.quorumError(quorum, "resume", len(granted), nil, errs)
		}
		return acquireReply{}, nil // not held
	}
	token, differ := quorumToken(replies, granted)
	tok := strconv.FormatInt(token, 10)
	if len(granted)-len(differ)+len(q.setToken(k, r.id, tok, differ)) < quorum {
		return acquireReply{}, q.quorumError(quorum, "resume", len(granted)-len(differ), nil, errs)
	}
	q.raiseToken(token)
	return acquireReply{granted: true, token: tok, weight: replies[granted[0]].weight}, nil
}

func (q *quorumStore) leave(ctx context.Context, k keyspace, wait, own string) ([]string, error) {
	var woken []string
	var errs []error
	gather(ctx, q, nil, func(ctx context.Context, _ int, n *redisStore) ([]string, error) {
		return n.leave(ctx, k, wait, own)
	}, func(a nodeAnswer[[]string]) bool {
		woken = union(woken, a.v)
		if a.err != nil {
			errs = append(errs, a.err)
		}
		return false
	}, nil)
	return woken, errors.Join(errs...)
}

func (q *quorumStore) holders(ctx context.Context, k keyspace) ([]Holder, error) {
	quorum := q.quorum(k)
	per := make([][]Holder, len(q.nodes))
	errs := make([]error, len(q.nodes))
	gather(ctx, q, nil, func(ctx context.Context, _ int, n *redisStore) ([]Holder, error) {
		return n.holders(ctx, k)
	}, func(a nodeAnswer[[]Holder]) bool {
		per[a.i], errs[a.i] = a.v, a.err
		return false
	}, nil)
	seen := map[string]int{}
	first := map[string]Holder{}
	answered := 0
	for i, err := range errs {
		if err != nil {
			continue
		}
		answered++
		for _, h := range per[i] {
			seen[h.ID]++
			if f, ok := first[h.ID]; !ok || h.TTL < f.TTL {
				first[h.ID] = h
			}
		}
	}
	if answered < quorum {
		return nil, q.quorumError(quorum, "holders", answered, nil, errs)
	}
	var out []Holder
	for id, n := range seen {
		if n >= quorum {
			out = append(out, first[id])
		}
	}
	slices.SortFunc(out, func(a, b Holder) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// handsOver: nodes that may disagree on the order only wake waiters.
func (q *quorumStore) handsOver() bool { return false }

// boundedByCtx: gather stops waiting for the nodes when ctx ends.
func (q *quorumStore) boundedByCtx() bool { return true }

// listen subscribes on every node (one connection each): every node that
// held a lease wakes its waiters, and a waiter's channel of wake-ups
// collapses the repeats. The subscription counts as up while any node's
// is.

func (q *quorumStore) listen(ctx context.Context, channel string, deliver func(string), subscribed func(error)) {
	var mu sync.Mutex
	up := make([]bool, len(q.nodes))
	var wg sync.WaitGroup
	for i, n := range q.nodes {
		wg.Add(1)
		q.spawn(func() {
			defer wg.Done()
			n.listen(ctx, channel, deliver, func(err error) {
				mu.Lock()
				defer mu.Unlock()
				up[i] = err == nil
				if slices.Contains(up, true) {
					subscribed(nil)
				} else {
					subscribed(fmt.Errorf("limiter: no node to wait on: %s: %w", q.addrs[i], err))
				}
			})
		})
	}
	wg.Wait()
}

// QuorumError reports an operation on a Redlock semaphore that did not
// reach a quorum of nodes: which nodes said the semaphore was full, and
// which failed (their errors are wrapped: errors.Is and errors.As see
// them). It matches ErrBusy when any node was full.
type QuorumError struct {
	Op     string
	Quorum int
	Nodes  int
	OK     int      // nodes that granted or answered
	Busy   []string // nodes that were full
	Failed []NodeError
}

// NodeError is one node's failure.
type NodeError struct {
	Addr string
	Err  error
}

func (q *quorumStore) quorumError(quorum int, op string, ok int, busy []int, errs []error) error {
	e := &QuorumError{Op: op, Quorum: quorum, Nodes: len(q.nodes), OK: ok}
	for _, i := range busy {
		e.Busy = append(e.Busy, q.addrs[i])
	}
	for i, err := range errs {
		if err != nil {
			e.Failed = append(e.Failed, NodeError{Addr: q.addrs[i], Err: err})
		}
	}
	return e
}

// Error names the nodes that were full and those that failed, with why.
func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "limiter: %s reached %d of %d nodes, quorum %d", e.Op, e.OK, e.Nodes, e.Quorum)
	if len(e.Busy) > 0 {
		fmt.Fprintf(&b, "; full: %s", strings.Join(e.Busy, ", "))
	}
	for _, f := range e.Failed {
		fmt.Fprintf(&b, "; %s failed: %v", f.Addr, f.Err)
	}
	return b.String()
}

// Unwrap returns the failed nodes' errors.
func (e *QuorumError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		errs[i] = f.Err
	}
	return errs
}

// Is matches ErrBusy when any node was full.
func (e *QuorumError) Is(target error) bool { return target == ErrBusy && len(e.Busy) > 0 }

// errFleetLimitOnQuorum: a quorum's size is made for the asking
// Semaphore's limit, and a stored limit above it would break that
// arithmetic, so Redlock Semaphores keep their own limits.
var errFleetLimitOnQuorum = errors.New("limiter: a fleet-wide limit is not supported on a Redlock Client")

func (q *quorumStore) setLimit(context.Context, keyspace, int64, string, time.Duration) ([]string, error) {
	return nil, errFleetLimitOnQuorum
}

func (q *quorumStore) fleetLimit(context.Context, keyspace) (int64, error) { return 0, nil }

// names lists the names found on any node.
func (q *quorumStore) names(ctx context.Context, pattern string) ([]string, error) {
	var out []string
	var errs []error
	for _, n := range q.nodes {
		got, err := n.names(ctx, pattern)
		errs = append(errs, err)
		out = union(out, got)
	}
	if len(out) == 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// waiters lists the first node's queue that answers: a quorum's queues
// only say whom to wake, and need not agree on order.
func (q *quorumStore) waiters(ctx context.Context, k keyspace, max int) ([]Waiter, error) {
	var errs []error
	for _, n := range q.nodes {
		ws, err := n.waiters(ctx, k, max)
		if err == nil {
			return ws, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}
