package limiter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// evalArgs starts the EVALSHA command of sc on k, with room for n
// arguments: one allocation, where Script.Run makes a variadic slice and
// the command's and boxes the hash and keys.
func evalArgs(sc luaScript, k keyspace, n int) []any {
	args := make([]any, 3, 3+len(k.keys)+n)
	args[0], args[1], args[2] = "evalsha", sc.sha, len(k.keys)
	return append(args, k.args...)
}

// eval runs sc once on the node of k, args being built by evalArgs: its
// function by FCALL, with its first key marked for routing (a
// ClusterClient sends it to that key's slot). A server that lacks the
// library is given it (FUNCTION LOAD) and asked again; one that cannot
// take it gets EVALSHA from then on, and EVAL if it lacks the script. With
// w on, it is EVALSHA followed by WAIT (evalWaited). Each fallback follows
// an error that Redis returns before running anything, so no call runs
// twice.
func (s *redisStore) eval(ctx context.Context, sc luaScript, k keyspace, w replicaWait, args []any) (cmd *redis.Cmd, acked int, waitErr error) {
	if w.on() {
		return s.evalWaited(ctx, k, w, sc, args[3+len(k.keys):]...)
	}
	if !s.noFunctions.Load() {
		loads := s.loads.Load()
		args[0], args[1] = "fcall", sc.fn
		cmd = s.send(ctx, args)
		if !isNoFunction(cmd.Err()) {
			return cmd, 0, nil
		}
		if s.loadFunctions(ctx, cmd.Err(), loads) {
			if cmd = s.send(ctx, args); !isNoFunction(cmd.Err()) {
				return cmd, 0, nil
			}
		}
		args[0], args[1] = "evalsha", sc.sha
	}
	cmd = s.send(ctx, args)
	if isNoScript(cmd.Err()) {
		cmd = sc.Eval(ctx, s.rdb, k.keys, args[3+len(k.keys):]...)
	}
	return cmd, 0, nil
}

func (s *redisStore) send(ctx context.Context, args []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	_ = s.rdb.Process(ctx, cmd)
	return cmd
}

// isNoFunction: FCALL did not run because the server lacks the function
// (restarted, flushed, or never given it), the command (Redis before 7)
// or the permission (an ACL).
func isNoFunction(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "Function not found") || isRefused(err))
}

// isRefused: the server will not run the command itself, whatever its
// arguments: unknown to it, or refused by an ACL. An ACL's refusal of a
// key ("no permissions to access ... key") is the call's own error, and
// EVALSHA would meet it alike.
func isRefused(err error) bool {
	return redis.HasErrorPrefix(err, "unknown command") ||
		redis.HasErrorPrefix(err, "NOPERM") && strings.Contains(err.Error(), "command")
}

// loadFunctions loads the library on every master that may serve a key
// (a Cluster's or a Ring's every one: which node FCALL reached is not
// known here), after FCALL failed with callErr, sent when loads loads had
// been tried. It reports whether FCALL may now succeed: a load tried since
// then (another call's) answers for this one. A server that refused FCALL
// or FUNCTION LOAD is not asked again.
func (s *redisStore) loadFunctions(ctx context.Context, callErr error, loads uint64) bool {
	if isRefused(callErr) {
		s.noFunctions.Store(true)
		return false
	}
	select {
	case s.loading <- struct{}{}:
		defer func() { <-s.loading }()
	case <-ctx.Done():
		return false
	}
	if s.loads.Load() != loads {
		return s.loaded.Load()
	}
	load := func(ctx context.Context, c *redis.Client) error {
		return c.FunctionLoadReplace(ctx, functions).Err()
	}
	var err error
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, load)
	case *redis.Ring:
		err = c.ForEachShard(ctx, load)
	default:
		err = s.rdb.FunctionLoadReplace(ctx, functions).Err()
	}
	if isRefused(err) {
		s.noFunctions.Store(true)
	}
	s.loaded.Store(err == nil)
	s.loads.Add(1)
	return err == nil
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

// refreshPlain sends calls as one pipeline, each as eval would send it
// (FCALL, or EVALSHA on a server without functions); a call the server
// lacked the function or script for goes again through eval, which loads
// it. A lone call goes through eval directly.
func (s *redisStore) refreshPlain(ctx context.Context, batches []refreshBatch, calls []*refreshCall) {
	command := func(c *refreshCall) (keyspace, []any) {
		k := batches[c.batch].keys
		return k, append(evalArgs(refreshScript, k, len(c.args)), c.args...)
	}
	switch len(calls) {
	case 0:
		return
	case 1:
		k, args := command(calls[0])
		calls[0].cmd, _, _ = s.eval(ctx, refreshScript, k, replicaWait{}, args)
		return
	}
	functions := !s.noFunctions.Load()
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range calls {
			_, args := command(c)
			if functions {
				args[0], args[1] = "fcall", refreshScript.fn
			}
			c.cmd = redis.NewCmd(ctx, args...)
			c.cmd.SetFirstKeyPos(3)
			_ = p.Process(ctx, c.cmd)
		}
		return nil
	})
	for _, c := range calls {
		if err := c.cmd.Err(); isNoFunction(err) || isNoScript(err) {
			k, args := command(c)
			c.cmd, _, _ = s.eval(ctx, refreshScript, k, replicaWait{}, args)
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

func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

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
