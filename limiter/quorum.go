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
	q.ident = id.String()
	return q
}

func (q *quorumStore) identity() any { return q.ident }

// each calls fn for every node in parallel, each bounded by the node
// timeout, and returns when all have answered or timed out.
func (q *quorumStore) each(ctx context.Context, fn func(ctx context.Context, i int, n *redisStore) error) []error {
	errs := make([]error, len(q.nodes))
	var wg sync.WaitGroup
	for i, n := range q.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nctx, cancel := context.WithTimeout(ctx, q.nodeTimeout)
			defer cancel()
			errs[i] = within(nctx, func() error { return fn(nctx, i, n) })
		}()
	}
	wg.Wait()
	return errs
}

// within returns when fn does or ctx ends, whichever is first: go-redis
// honours context deadlines on the socket only with ContextTimeoutEnabled,
// and a paused node must not hold up the quorum. fn must only write state
// that nobody reads after a timeout.
func within(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (q *quorumStore) acquire(ctx context.Context, k keyspace, r acquireRequest) (acquireReply, error) {
	start := time.Now()
	r.proposed = strconv.FormatInt(max(time.Now().UnixMicro(), q.lastToken.Load()+1), 10)
	replies := make([]acquireReply, len(q.nodes))
	errs := q.each(ctx, func(ctx context.Context, i int, n *redisStore) error {
		rep, err := n.acquire(ctx, k, r)
		if err == nil {
			replies[i] = rep // only read below when err == nil
		}
		return err
	})
	var granted, busy []int
	var token int64
	agree := true
	for i, err := range errs {
		switch {
		case err != nil:
		case replies[i].granted:
			t, _ := strconv.ParseInt(replies[i].token, 10, 64)
			agree = agree && (len(granted) == 0 || t == token)
			token = max(token, t)
			granted = append(granted, i)
		default:
			busy = append(busy, i)
		}
	}
	validity := r.ttl - time.Since(start) - q.cfg.drift(r.ttl)
	if len(granted) >= q.quorum && validity > 0 {
		tok := strconv.FormatInt(token, 10)
		if agree || q.writeBack(ctx, k, r.id, tok, granted) {
			q.raiseToken(token)
			return acquireReply{granted: true, token: tok, weight: replies[granted[0]].weight}, nil
		}
	}
	// No quorum: give back what was granted, and, for a random id, what
	// a node may have granted with the reply lost.
	undo := granted
	if !r.idGiven {
		undo = nil
		for i, err := range errs {
			if err != nil || replies[i].granted {
				undo = append(undo, i)
			}
		}
	}
	q.rollback(k, r.id, undo)
	if len(granted)+len(busy) >= q.quorum {
		// Enough nodes answered: the semaphore is full (or we were too
		// slow for the TTL); wait as on a single node.
		rep := acquireReply{retryIn: r.ttl}
		for _, i := range busy {
			rep.retryIn = min(rep.retryIn, replies[i].retryIn)
			rep.inUse = max(rep.inUse, replies[i].inUse)
		}
		if len(busy) == 0 {
			rep.retryIn = 0
		}
		return rep, nil
	}
	return acquireReply{}, q.quorumError("acquire", len(granted), busy, errs)
}

// writeBack gives the granted leases the quorum's token.
func (q *quorumStore) writeBack(ctx context.Context, k keyspace, id, token string, granted []int) bool {
	var ok atomic.Int32
	q.each(ctx, func(ctx context.Context, i int, n *redisStore) error {
		if !slices.Contains(granted, i) {
			return nil
		}
		v, err := setTokenScript.Run(ctx, n.rdb, k.keys, id, token).Int64()
		if err == nil && v == 1 {
			ok.Add(1)
		}
		return err
	})
	return int(ok.Load()) >= q.quorum
}

func (q *quorumStore) raiseToken(t int64) {
	for {
		cur := q.lastToken.Load()
		if t <= cur || q.lastToken.CompareAndSwap(cur, t) {
			return
		}
	}
}

func (q *quorumStore) rollback(k keyspace, id string, nodes []int) {
	if len(nodes) == 0 {
		return
	}
	q.each(context.Background(), func(ctx context.Context, i int, n *redisStore) error {
		if !slices.Contains(nodes, i) {
			return nil
		}
		_, err := n.release(ctx, k, id, "", "")
		return err
	})
}

func (q *quorumStore) refresh(ctx context.Context, reqs []refreshRequest) []refreshReply {
	per := make([][]refreshReply, len(q.nodes))
	errs := q.each(ctx, func(ctx context.Context, i int, n *redisStore) error {
		reps := n.refresh(ctx, reqs)
		per[i] = reps
		return nil
	})
	out := make([]refreshReply, len(reqs))
	for j := range reqs {
		held, gone := 0, 0
		nodeErrs := make([]error, len(q.nodes))
		for i := range q.nodes {
			switch {
			case errs[i] != nil:
				nodeErrs[i] = errs[i]
			case per[i][j].err != nil:
				nodeErrs[i] = per[i][j].err
			case per[i][j].held:
				if held == 0 {
					out[j] = per[i][j]
				}
				held++
			default:
				gone++
			}
		}
		switch {
		case held >= q.quorum:
		case gone > len(q.nodes)-q.quorum:
			out[j] = refreshReply{} // a quorum can no longer hold it
		default:
			out[j] = refreshReply{err: q.quorumError("refresh", held, nil, nodeErrs)}
		}
	}
	return out
}

func (q *quorumStore) release(ctx context.Context, k keyspace, id, token, origin string) (int64, error) {
	freed := make([]int64, len(q.nodes))
	errs := q.each(ctx, func(ctx context.Context, i int, n *redisStore) error {
		v, err := n.release(ctx, k, id, token, origin)
		freed[i] = v
		return err
	})
	var most int64
	answered := 0
	for i, err := range errs {
		if err == nil {
			answered++
			most = max(most, freed[i])
		}
	}
	if most > 0 || answered >= q.quorum {
		return most, nil // nodes that did not answer let it expire
	}
	return 0, q.quorumError("release", 0, nil, errs)
}

func (q *quorumStore) holders(ctx context.Context, k keyspace) ([]Holder, error) {
	per := make([][]Holder, len(q.nodes))
	errs := q.each(ctx, func(ctx context.Context, i int, n *redisStore) error {
		hs, err := n.holders(ctx, k)
		per[i] = hs
		return err
	})
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
	errs := q.each(ctx, func(ctx context.Context, i int, n *redisStore) error {
		s, err := n.subscribe(ctx, channel)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if done {
			s.close()
		} else {
			subs[i] = s
		}
		return nil
	})
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

func (e *QuorumError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		errs[i] = f.Err
	}
	return errs
}

func (e *QuorumError) Is(target error) bool { return target == ErrBusy && len(e.Busy) > 0 }
