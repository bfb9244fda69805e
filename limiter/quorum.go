package limiter

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewRedlockSemaphore returns a semaphore kept on N independent Redis
// nodes (no replication between them): a lease is held while a quorum of
// the nodes hold it, and each node admits at most limit permits. Every
// method behaves as on a single node; see QuorumError for what a failed
// quorum reports. Nodes must be distinct and non-nil. Nothing is sent to
// Redis.
//
// The quorum is ⌊N·limit/(limit+1)⌋+1 nodes: a majority for a mutex (as in
// Redlock), more for larger limits. A majority is not enough for a limit
// above 1: with 3 nodes and limit 3, four holders can each sit on two
// nodes without any node holding more than three. With this quorum, limit+1
// holders would need more than N·limit node slots. So a semaphore survives
// f failed nodes only when N >= f·(limit+1)+1: 3 nodes for a mutex with
// f=1, 4 nodes for limit 2, 5 for limit 3.
//
// A node that restarts empty must stay out for at least the longest TTL
// (or keep its data), else a lease held by a bare quorum can lose it.
func NewRedlockSemaphore(nodes []redis.UniversalClient, name string, limit int64, opts ...Option) (*Semaphore, error) {
	addrs, err := checkNodes(nodes)
	if err != nil {
		return nil, err
	}
	return newSemaphore(name, limit, opts, func(cfg *config) store {
		return newQuorumStore(nodes, addrs, quorumSize(len(nodes), limit), cfg)
	})
}

// quorumSize is the fewest nodes a lease must be on so that no limit+1
// permits can be held: any limit+1 leases on q nodes each need
// (limit+1)·q > N·limit node slots, more than the nodes admit.
func quorumSize(nodes int, limit int64) int {
	return int(int64(nodes)*limit/(limit+1)) + 1
}

// NewRedlockMutex is NewRedlockSemaphore with one permit.
func NewRedlockMutex(nodes []redis.UniversalClient, name string, opts ...Option) (*Mutex, error) {
	s, err := NewRedlockSemaphore(nodes, name, 1, opts...)
	if err != nil {
		return nil, err
	}
	return &Mutex{s}, nil
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
	quorum      int
	nodeTimeout time.Duration
	cfg         *config
	ident       string
	lastToken   atomic.Int64 // highest token seen, so proposals only grow
}

func newQuorumStore(nodes []redis.UniversalClient, addrs []string, quorum int, cfg *config) *quorumStore {
	q := &quorumStore{addrs: addrs, quorum: quorum, nodeTimeout: cfg.nodeTimeout, cfg: cfg}
	var id strings.Builder
	id.WriteString("quorum")
	for _, n := range nodes {
		q.nodes = append(q.nodes, newRedisStore(n))
		fmt.Fprintf(&id, ":%p", n)
	}
	// The refresher shared under this identity runs this store's quorum
	// rules, so stores that count differently must not share it.
	fmt.Fprintf(&id, ";q=%d;t=%v", quorum, cfg.nodeTimeout)
	q.ident = id.String()
	return q
}

func (q *quorumStore) identity() any { return q.ident }

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
		go func() {
			nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.nodeTimeout)
			defer cancel()
			v, err := within(nctx, func() (T, error) { return ask(nctx, i, q.nodes[i]) })
			answers <- nodeAnswer[T]{i: i, v: v, err: err}
		}()
	}
	rest := len(nodes)
	defer func() {
		if rest > 0 && late != nil {
			go func() {
				for range rest {
					late(<-answers)
				}
			}()
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

func (q *quorumStore) acquire(ctx context.Context, k keyspace, r acquireRequest) (acquireReply, error) {
	start := time.Now()
	r.proposed = strconv.FormatInt(max(time.Now().UnixMicro(), q.lastToken.Load()+1), 10)
	n := len(q.nodes)
	replies := make([]acquireReply, n)
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
		return len(busy) > n-q.quorum
	}, func(a nodeAnswer[acquireReply]) {
		// A grant after an early "full" is given back, by its own token
		// so that no later attempt with the same id is touched.
		if a.err == nil && a.v.granted && !r.idGiven {
			q.releaseOn(k, r.id, map[int]string{a.i: a.v.token})
		}
	})
	validity := r.ttl - time.Since(start) - q.cfg.drift(r.ttl)
	if len(granted) >= q.quorum && validity > 0 {
		token, differ := quorumToken(replies, granted)
		tok := strconv.FormatInt(token, 10)
		if len(granted)-len(differ)+q.setToken(k, r.id, tok, differ) >= q.quorum {
			q.raiseToken(token)
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
			undo[i] = replies[i].token
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
	if len(failed) <= n-q.quorum {
		// Failures alone do not rule out a quorum: the semaphore is full
		// (or we were too slow for the TTL); wait as on a single node.
		rep := acquireReply{}
		for i, b := range busy {
			if i == 0 || replies[b].retryIn < rep.retryIn {
				rep.retryIn = replies[b].retryIn
			}
			rep.inUse = max(rep.inUse, replies[b].inUse)
		}
		return rep, nil
	}
	return acquireReply{}, q.quorumError("acquire", len(granted), busy, errs)
}

// quorumToken picks the lease's token: that of a lease the id already held
// (its holder knows that token), else the highest granted. differ lists
// the granting nodes that hold another token.
func quorumToken(replies []acquireReply, granted []int) (token int64, differ []int) {
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
	for _, i := range granted {
		if replies[i].token != strconv.FormatInt(token, 10) {
			differ = append(differ, i)
		}
	}
	return token, differ
}

// setToken gives the lease on the given nodes the quorum's token (the
// write-back) and reports on how many it did.
func (q *quorumStore) setToken(k keyspace, id, token string, nodes []int) int {
	if len(nodes) == 0 {
		return 0
	}
	ok := 0
	gather(context.Background(), q, nodes, func(ctx context.Context, _ int, n *redisStore) (int64, error) {
		return setTokenScript.Run(ctx, n.rdb, k.keys, id, token).Int64()
	}, func(a nodeAnswer[int64]) bool {
		if a.err == nil && a.v == 1 {
			ok++
		}
		return false
	}, nil)
	return ok
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
// node -> token ("" = any). It waits for the nodes that answer and leaves
// the silent ones to finish in the background.
func (q *quorumStore) releaseOn(k keyspace, id string, tokens map[int]string) {
	if len(tokens) == 0 {
		return
	}
	nodes := make([]int, 0, len(tokens))
	for i := range tokens {
		nodes = append(nodes, i)
	}
	pending := len(nodes)
	gather(context.Background(), q, nodes, func(ctx context.Context, i int, n *redisStore) (int64, error) {
		return n.release(ctx, k, id, tokens[i], "")
	}, func(a nodeAnswer[int64]) bool {
		if a.err == nil {
			pending--
		}
		return pending == 0
	}, nil)
}

func (q *quorumStore) refresh(ctx context.Context, reqs []refreshRequest) []refreshReply {
	n := len(q.nodes)
	out := make([]refreshReply, len(reqs))
	held := make([]int, len(reqs))
	gone := make([]int, len(reqs))
	nodeErrs := make([][]error, len(reqs))
	for j := range nodeErrs {
		nodeErrs[j] = make([]error, n)
	}
	decided := func(j int) bool { return held[j] >= q.quorum || gone[j] > n-q.quorum }
	gather(ctx, q, nil, func(ctx context.Context, _ int, node *redisStore) ([]refreshReply, error) {
		return node.refresh(ctx, reqs), nil
	}, func(a nodeAnswer[[]refreshReply]) bool {
		all := true
		for j := range reqs {
			if decided(j) {
				continue
			}
			switch {
			case a.err != nil:
				nodeErrs[j][a.i] = a.err
			case a.v[j].err != nil:
				nodeErrs[j][a.i] = a.v[j].err
			case a.v[j].held:
				if held[j] == 0 {
					out[j] = a.v[j]
				}
				held[j]++
			default:
				gone[j]++
			}
			all = all && decided(j)
		}
		return all
	}, nil)
	for j := range reqs {
		switch {
		case held[j] >= q.quorum:
		case gone[j] > n-q.quorum:
			out[j] = refreshReply{} // a quorum can no longer hold it
		default:
			out[j] = refreshReply{err: q.quorumError("refresh", held[j], nil, nodeErrs[j])}
		}
	}
	return out
}

// release returns once a quorum answered; the other nodes finish (or let
// the lease expire) in the background.
func (q *quorumStore) release(ctx context.Context, k keyspace, id, token, origin string) (int64, error) {
	errs := make([]error, len(q.nodes))
	var most int64
	answered, failed := 0, 0
	gather(ctx, q, nil, func(ctx context.Context, _ int, n *redisStore) (int64, error) {
		return n.release(ctx, k, id, token, origin)
	}, func(a nodeAnswer[int64]) bool {
		errs[a.i] = a.err
		if a.err != nil {
			failed++
		} else {
			answered++
			most = max(most, a.v)
		}
		return answered >= q.quorum || failed > len(q.nodes)-q.quorum
	}, nil)
	if most > 0 || answered >= q.quorum {
		return most, nil
	}
	return 0, q.quorumError("release", answered, nil, errs)
}

func (q *quorumStore) holders(ctx context.Context, k keyspace) ([]Holder, error) {
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
	if answered < q.quorum {
		return nil, q.quorumError("holders", answered, nil, errs)
	}
	var out []Holder
	for id, n := range seen {
		if n >= q.quorum {
			out = append(out, first[id])
		}
	}
	slices.SortFunc(out, func(a, b Holder) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// subscribe listens on every node it can reach; a release is published by
// each node that held the lease, and the hub's wake-ups coalesce.
func (q *quorumStore) subscribe(ctx context.Context, channel string) (subscription, error) {
	var (
		mu   sync.Mutex
		subs = make([]subscription, len(q.nodes))
		done bool // after it, late subscriptions close themselves
	)
	errs := make([]error, len(q.nodes))
	gather(ctx, q, nil, func(ctx context.Context, i int, n *redisStore) (struct{}, error) {
		s, err := n.subscribe(ctx, channel)
		if err != nil {
			return struct{}{}, err
		}
		mu.Lock()
		defer mu.Unlock()
		if done {
			s.close()
		} else {
			subs[i] = s
		}
		return struct{}{}, nil
	}, func(a nodeAnswer[struct{}]) bool {
		errs[a.i] = a.err
		return false
	}, nil)
	mu.Lock()
	done = true
	mu.Unlock()
	m := &mergedSub{ch: make(chan *redis.Message, 16)}
	var wg sync.WaitGroup
	for i, s := range subs {
		if s == nil {
			continue
		}
		if errs[i] != nil { // confirmed just after its node timeout
			s.close()
			continue
		}
		m.subs = append(m.subs, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for msg := range s.messages() {
				m.ch <- msg
			}
		}()
	}
	if len(m.subs) == 0 {
		return nil, q.quorumError("subscribe", 0, nil, errs)
	}
	go func() { wg.Wait(); close(m.ch) }()
	return m, nil
}

type mergedSub struct {
	subs []subscription
	ch   chan *redis.Message
}

func (m *mergedSub) messages() <-chan *redis.Message { return m.ch }
func (m *mergedSub) close() {
	for _, s := range m.subs {
		s.close()
	}
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

func (q *quorumStore) quorumError(op string, ok int, busy []int, errs []error) error {
	e := &QuorumError{Op: op, Quorum: q.quorum, Nodes: len(q.nodes), OK: ok}
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
