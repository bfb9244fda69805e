package limiter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisStore keeps leases in one Redis deployment: a node, a Sentinel
// failover client or a Cluster (every key of a semaphore is in one slot).
type redisStore struct {
	rdb redis.UniversalClient
	// fifo grants in queue order; a quorum's nodes do not (see acquire.lua).
	fifo bool
	// ctxBound: go-redis honours ctx deadlines here (boundedByCtx).
	ctxBound bool
	// Boxing a script argument allocates (a string, an int above 255):
	// these box once what a Client repeats in every call, its owner id
	// and channel (a store serves one Client), and its first TTL in ms
	// (the quarantine defaults to it).
	owner, channel firstBox[string, any]
	ms             firstBox[int64, any]
	// noFunctions: the server cannot run or load the function library
	// (Redis before 7, an ACL without FCALL or FUNCTION LOAD, a fake), so
	// eval sends EVALSHA.
	noFunctions atomic.Bool
	// loads counts the library loads tried, loaded whether the last one
	// succeeded, and loading lets one run at a time: the calls that found
	// the library missing at once (after a flush, a restart, a failover)
	// load it once, not each, and a load that failed (a master down) is
	// not tried again by every call queued behind it.
	loads   atomic.Uint64
	loaded  atomic.Bool
	loading chan struct{}
}

func newRedisStore(rdb redis.UniversalClient, fifo bool) *redisStore {
	return &redisStore{rdb: rdb, fifo: fifo, ctxBound: honoursDeadlines(rdb), loading: make(chan struct{}, 1)}
}

// honoursDeadlines reports whether go-redis puts a context's deadline on
// the socket for rdb (ContextTimeoutEnabled), so that a call to a
// stopped server returns by it.
func honoursDeadlines(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

func (s *redisStore) boundedByCtx() bool { return s.ctxBound }

func (s *redisStore) handsOver() bool { return s.fifo }

// refreshChunk bounds the leases one refresh script call keeps alive, so
// one call's Redis time stays bounded however many a Client holds.
const refreshChunk = 2000

func (s *redisStore) acquire(ctx context.Context, k keyspace, r acquireRequest) (acquireReply, error) {
	args := append(evalArgs(acquireScript, k, 14), r.limit, r.weight, s.ms.get(r.ttl.Milliseconds(), box), r.id, r.proposed,
		s.owner.get(r.owner, box), r.reclaimAbove, r.wait, queueTTLms, s.channel.get(r.channel, box), flag(s.fifo),
		flag(r.handoff), s.ms.get(r.quarantine.Milliseconds(), box), flag(r.exactToken))
	cmd, acked, waitErr := s.eval(ctx, acquireScript, k, r.replicas, args)
	v, err := cmd.Slice()
	if err != nil {
		return acquireReply{}, err
	}
	rep, err := parseAcquire(v)
	rep.acked, rep.waitErr = acked, waitErr
	return rep, err
}

// flag boxes b without allocating, as constant strings are.
func flag(b bool) any {
	if b {
		return "1"
	}
	return "0"
}

// queueTTLms is boxed once; see redisStore.
var queueTTLms any = queueTTL.Milliseconds()

func box[T any](v T) any { return v }

// firstBox remembers the first key it is given and the value made of it,
// and makes the value again for any other key: one entry, set once, so a
// miss costs what no cache would, and nothing needs evicting.
type firstBox[K comparable, V any] struct {
	p atomic.Pointer[boxed[K, V]]
}

type boxed[K comparable, V any] struct {
	k K
	v V
}

func (f *firstBox[K, V]) get(k K, mk func(K) V) V {
	e := f.p.Load()
	if e != nil && e.k == k {
		return e.v
	}
	v := mk(k)
	if e == nil {
		f.p.CompareAndSwap(nil, &boxed[K, V]{k, v})
	}
	return v
}

// evalArgs starts the command that runs sc on k (scriptCmd writes its
// head), with room for n arguments: one allocation, where Script.Run makes
// a variadic slice and the command's and boxes the hash and keys.
func evalArgs(sc luaScript, k keyspace, n int) []any {
	args := make([]any, 3, 3+len(k.keys)+n)
	args[0], args[1], args[2] = "evalsha", sc.sha, len(k.keys)
	return append(args, k.args...)
}

// eval runs sc once on the node of k, args being built by evalArgs: sent
// the first way this server takes (send.go), with its first key marked for
// routing (a ClusterClient sends it to that key's slot). With w on, it
// is followed by WAIT (evalWaited).
func (s *redisStore) eval(ctx context.Context, sc luaScript, k keyspace, w replicaWait, args []any) (cmd *redis.Cmd, acked int, waitErr error) {
	if w.on() {
		return s.evalWaited(ctx, k, w, sc, args[3+len(k.keys):]...)
	}
	for way := s.firstWay(); ; {
		loads := s.loads.Load()
		cmd = scriptCmd(ctx, sc, way, args)
		_ = s.rdb.Process(ctx, cmd)
		var again bool
		if way, again = s.nextWay(ctx, way, cmd.Err(), loads); !again {
			return cmd, 0, nil
		}
	}
}

func parseAcquire(v []any) (acquireReply, error) {
	if len(v) < 2 {
		return acquireReply{}, fmt.Errorf("unexpected acquire reply %v", v)
	}
	switch code, _ := v[0].(int64); {
	case code == -1:
		w, _ := v[1].(int64)
		return acquireReply{heldWeight: w}, nil
	case code == -2:
		n, _ := v[1].(int64)
		return acquireReply{fleetLimit: max(n, 1)}, nil
	case code == 1 && len(v) >= 5:
		tok, _ := v[1].(string)
		w, _ := v[2].(int64)
		free, _ := v[3].(int64)
		existed, _ := v[4].(int64)
		return acquireReply{granted: true, token: tok, weight: w, free: max(free, 0), existed: existed == 1,
			woken: stringsOf(v[5:])}, nil
	case code == 0 && len(v) == 6:
		wait, _ := v[1].(int64)
		inUse, _ := v[2].(int64)
		head, _ := v[3].(int64)
		last, _ := v[4].(string)
		restarted, _ := v[5].(int64)
		return acquireReply{retryIn: time.Duration(max(wait, 0)) * time.Millisecond, inUse: inUse, head: head == 1,
			lastToken: last, restarted: restarted == 1}, nil
	}
	return acquireReply{}, fmt.Errorf("unexpected acquire reply %v", v)
}

func stringsOf(v []any) []string {
	if len(v) == 0 {
		return nil
	}
	out := make([]string, 0, len(v))
	for _, x := range v {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// refreshCall is one call of the refresh script: a batch or a chunk of
// one.
type refreshCall struct {
	batch int
	args  []any
	cmd   *redis.Cmd
	// acked and waitErr answer the WAIT that followed it, when its batch
	// asks for replicas.
	acked   int
	waitErr error
}

func (s *redisStore) refresh(ctx context.Context, batches []refreshBatch) []refreshResult {
	var calls, plain, waited []*refreshCall
	for i, b := range batches {
		for _, args := range refreshArgs(b) {
			c := &refreshCall{batch: i, args: args}
			calls = append(calls, c)
			if b.replicas.on() {
				waited = append(waited, c)
			} else {
				plain = append(plain, c)
			}
		}
	}
	if len(waited) == 0 {
		s.refreshPlain(ctx, batches, plain)
	} else {
		// At once: a WAIT that takes its timeout does not hold up the
		// refreshes that need none.
		runAll(func() { s.refreshPlain(ctx, batches, plain) }, func() { s.refreshWaited(ctx, batches, waited) })
	}
	out := make([]refreshResult, len(batches))
	for _, c := range calls {
		r := &out[c.batch]
		// The calls of a batch share its node's pipeline, and one WAIT.
		r.acked, r.waitErr = c.acked, c.waitErr
		v, err := c.cmd.Slice()
		if err != nil {
			r.err = err
			continue
		}
		n, _ := strconv.Atoi(fmt.Sprint(c.args[0]))
		for j, x := range v {
			code, _ := x.(int64)
			if j < n {
				r.held = append(r.held, code == 1)
			} else {
				r.waits = append(r.waits, code)
			}
		}
	}
	for i := range out {
		if out[i].err != nil {
			out[i].held, out[i].waits = nil, nil
		}
	}
	return out
}

// refreshPlain sends calls as one pipeline, each the first way this
// server takes (send.go); a call the server lacked the function or script
// for goes again through eval, which loads it.
func (s *redisStore) refreshPlain(ctx context.Context, batches []refreshBatch, calls []*refreshCall) {
	if len(calls) == 0 {
		return
	}
	way := s.firstWay()
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range calls {
			c.cmd = script(ctx, p, refreshScript, way, batches[c.batch].keys, c.args...)
		}
		return nil
	})
	for _, c := range calls {
		if lacks(way, c.cmd.Err()) {
			k := batches[c.batch].keys
			c.cmd, _, _ = s.eval(ctx, refreshScript, k, replicaWait{}, append(evalArgs(refreshScript, k, len(c.args)), c.args...))
		}
	}
}

// refreshArgs splits a batch into script calls of at most refreshChunk
// leases or waiters (Lua's unpack takes a few thousand values at most).
func refreshArgs(b refreshBatch) [][]any {
	var out [][]any
	leases, waits := b.leases, b.waits
	for {
		n := min(len(leases), refreshChunk)
		m := min(len(waits), refreshChunk/2)
		if n > 0 {
			m = 0 // waiters go in calls of their own
		}
		args := make([]any, 0, 1+3*n+1+m)
		args = append(args, n)
		for _, l := range leases[:n] {
			args = append(args, l.id, l.token, l.ttl.Milliseconds())
		}
		if m > 0 {
			args = append(args, queueTTL.Milliseconds())
			for _, w := range waits[:m] {
				args = append(args, w)
			}
		}
		leases, waits = leases[n:], waits[m:]
		out = append(out, args)
		if len(leases) == 0 && len(waits) == 0 {
			return out
		}
	}
}

func (s *redisStore) release(ctx context.Context, k keyspace, r releaseRequest) (releaseReply, error) {
	args := append(evalArgs(releaseScript, k, 5), r.id, r.token, s.channel.get(r.own, box), flag(r.wake), flag(r.check))
	cmd, _, _ := s.eval(ctx, releaseScript, k, replicaWait{}, args)
	v, err := cmd.Slice()
	if err != nil {
		return releaseReply{}, err
	}
	freed, _ := v[0].(int64)
	return releaseReply{freed: freed, woken: stringsOf(v[1:])}, nil
}

func (s *redisStore) resume(ctx context.Context, k keyspace, r resumeRequest) (acquireReply, error) {
	args := append(evalArgs(resumeScript, k, 5), r.id, r.token, r.ttl.Milliseconds(), r.owner, r.proposed)
	cmd, acked, waitErr := s.eval(ctx, resumeScript, k, r.replicas, args)
	v, err := cmd.Result()
	if err != nil {
		return acquireReply{}, err
	}
	pair, ok := v.([]any)
	if !ok || len(pair) != 2 {
		return acquireReply{}, nil // not held
	}
	w, _ := pair[0].(int64)
	tok, _ := pair[1].(string)
	return acquireReply{granted: true, token: tok, weight: w, acked: acked, waitErr: waitErr}, nil
}

func (s *redisStore) leave(ctx context.Context, k keyspace, wait, own string) ([]string, error) {
	v, err := leaveScript.Run(ctx, s.rdb, k.keys, wait, own).Slice()
	return stringsOf(v), err
}

func (s *redisStore) holders(ctx context.Context, k keyspace) ([]Holder, error) {
	v, err := holdersScript.Run(ctx, s.rdb, k.keys).Slice()
	if err != nil {
		return nil, err
	}
	return parseHolders(v)
}

func parseHolders(v []any) ([]Holder, error) {
	if len(v)%4 != 0 {
		return nil, errors.New("unexpected holders reply")
	}
	hs := make([]Holder, 0, len(v)/4)
	for i := 0; i < len(v); i += 4 {
		id, _ := v[i].(string)
		w, _ := v[i+1].(int64)
		tok, _ := v[i+2].(string)
		left, _ := v[i+3].(int64)
		t, _ := strconv.ParseInt(tok, 10, 64)
		hs = append(hs, Holder{ID: id, Weight: w, Token: t, TTL: time.Duration(left) * time.Millisecond})
	}
	return hs, nil
}

// listen keeps one pub/sub connection (plain SUBSCRIBE: on a Cluster a
// PUBLISH reaches every node, so one connection to any node hears the
// wake-ups of every slot) subscribed to channel until ctx ends.
func (s *redisStore) listen(ctx context.Context, channel string, deliver func(string), subscribed func(error)) {
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		ps := s.rdb.Subscribe(ctx)
		stop := context.AfterFunc(ctx, func() { _ = ps.Close() }) // unblocks a pending receive
		err := ps.Subscribe(ctx, channel)
		if err == nil {
			err = receive(ctx, ps, deliver, subscribed)
		}
		stop()
		_ = ps.Close()
		if ctx.Err() != nil {
			return
		}
		subscribed(err)
		sleepCtx(ctx, backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// receive hands messages on while the connection lives. go-redis replaces
// a broken connection (and re-subscribes) by itself; one that stays silent
// past a ping is given up on, since a black-holed connection never errs.
func receive(ctx context.Context, ps *redis.PubSub, deliver func(string), subscribed func(error)) error {
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, 15*time.Second)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ne interface{ Timeout() bool }
		switch {
		case err != nil && errors.As(err, &ne) && ne.Timeout():
			if pinged {
				return err
			}
			pinged = true
			_ = ps.Ping(ctx)
			continue
		case err != nil:
			subscribed(err)
			sleepCtx(ctx, 10*time.Millisecond)
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				subscribed(nil)
			}
		case *redis.Message:
			deliver(m.Payload)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
