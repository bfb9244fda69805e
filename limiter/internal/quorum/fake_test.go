package quorum

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter/internal/redisstore"
	"github.com/redsem/redsem/limiter/internal/scriptcall"
	"github.com/redsem/redsem/limiter/internal/store"
)

// A quorum takes its nodes as *redisstore.Store, a concrete type, so the
// fake node sits one layer down: a go-redis client whose hook answers the
// scripts' calls from memory (no connection is ever made). It keeps
// leases by id and answers as acquire.lua, release.lua, settoken.lua,
// refresh.lua and resume.lua reply, closely enough for the quorum's
// counting; what each node does is set per test.

// fakeNode is one in-memory node.
type fakeNode struct {
	addr    string
	unblock <-chan struct{} // closed when the test ends: hung calls return

	mu     sync.Mutex
	leases map[string]fakeLease // by lease id
	calls  []fakeCall
	// What the node does, set by the test.
	full     bool          // every acquire answers full
	fail     error         // every call, PING too, fails with it
	failOp   string        // only calls of this script fail with fail ("": all)
	hang     bool          // every call waits for its ctx to end
	delay    time.Duration // before every answer
	grant    string        // token it grants ("": the proposed one)
	setToken error         // the write-back fails with it
}

type fakeLease struct {
	token  string
	weight int64
	owner  string
}

// fakeCall is one script call the node received (answered or not).
type fakeCall struct {
	op, id, token string
}

// fakeQuorum is a quorum of fake nodes and what its background work
// needs: the test ends its probes and waits for every goroutine.
type fakeQuorum struct {
	*Store
	nodes []*fakeNode
}

// newFakeQuorum returns a quorum of fake nodes, named addrs in this order.
func newFakeQuorum(t *testing.T, timeout time.Duration, addrs ...string) fakeQuorum {
	t.Helper()
	done, unblock := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	var stores []*redisstore.Store
	var nodes []*fakeNode
	for _, addr := range addrs {
		n := &fakeNode{addr: addr, unblock: unblock, leases: map[string]fakeLease{}}
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		rdb.AddHook(n)
		t.Cleanup(func() { _ = rdb.Close() })
		nodes = append(nodes, n)
		stores = append(stores, redisstore.New(rdb, false))
	}
	q := New(stores, Config{
		NodeTimeout: timeout,
		Drift:       func(ttl time.Duration) time.Duration { return ttl / 100 },
		Spawn: func(f func()) {
			wg.Add(1)
			go func() { defer wg.Done(); f() }()
		},
		Done: done,
	})
	t.Cleanup(func() {
		close(done)
		close(unblock)
		wg.Wait()
	})
	return fakeQuorum{Store: q, nodes: nodes}
}

func (n *fakeNode) set(f func(n *fakeNode)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f(n)
}

// hold puts a lease on the node, as a grant made before the test.
func (n *fakeNode) hold(id, token string, weight int64) {
	n.set(func(n *fakeNode) { n.leases[id] = fakeLease{token: token, weight: weight} })
}

// held returns the lease id's token on the node ("": not held).
func (n *fakeNode) held(id string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leases[id].token
}

// count is how many leases the node holds.
func (n *fakeNode) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.leases)
}

// got returns the calls of op the node received.
func (n *fakeNode) got(op string) []fakeCall {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []fakeCall
	for _, c := range n.calls {
		if c.op == op {
			out = append(out, c)
		}
	}
	return out
}

func (n *fakeNode) DialHook(redis.DialHook) redis.DialHook {
	return func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("fake node: no network")
	}
}

func (n *fakeNode) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		n.process(ctx, cmd)
		return cmd.Err()
	}
}

func (n *fakeNode) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			n.process(ctx, cmd)
		}
		return nil
	}
}

// op names the script a command runs ("ping" for PING).
func op(args []any) (string, []any) {
	if strings.EqualFold(fmt.Sprint(args[0]), "ping") {
		return "ping", nil
	}
	for _, name := range []string{"acquire", "release", "settoken"} {
		if argv, ok := scriptcall.Args(name, args); ok {
			return name, argv
		}
	}
	// The library's other functions, by their names' suffix.
	if len(args) >= 3 && args[0] == "fcall" {
		name := fmt.Sprint(args[1])
		keys, _ := args[2].(int)
		return name[strings.LastIndexByte(name, '_')+1:], args[3+keys:]
	}
	return fmt.Sprint(args[0]), nil
}

func (n *fakeNode) process(ctx context.Context, cmd redis.Cmder) {
	name, argv := op(cmd.Args())
	n.mu.Lock()
	call := fakeCall{op: name}
	if len(argv) > 0 && name != "refresh" {
		call.id = fmt.Sprint(argv[0])
	}
	switch name {
	case "release", "settoken":
		call.token = fmt.Sprint(argv[1])
	}
	n.calls = append(n.calls, call)
	hang, delay, fail := n.hang, n.delay, n.fail
	if n.failOp != "" && n.failOp != name {
		fail = nil
	}
	n.mu.Unlock()
	if hang {
		select {
		case <-ctx.Done():
			cmd.SetErr(ctx.Err())
		case <-n.unblock:
			cmd.SetErr(errors.New("fake node: test over"))
		}
		return
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			cmd.SetErr(ctx.Err())
			return
		}
	}
	if fail != nil {
		cmd.SetErr(fail)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch name {
	case "ping":
		cmd.(*redis.StatusCmd).SetVal("PONG")
	case "acquire":
		cmd.(*redis.Cmd).SetVal(n.acquire(argv))
	case "release":
		cmd.(*redis.Cmd).SetVal(n.release(argv))
	case "settoken":
		if n.setToken != nil {
			cmd.SetErr(n.setToken)
			return
		}
		cmd.(*redis.Cmd).SetVal(n.writeBack(argv))
	case "refresh":
		cmd.(*redis.Cmd).SetVal(n.refresh(argv))
	case "resume":
		cmd.(*redis.Cmd).SetVal(n.resume(argv))
	default:
		cmd.SetErr(fmt.Errorf("fake node: %s not faked", name))
	}
}

func integer(v any) int64 {
	i, _ := strconv.ParseInt(fmt.Sprint(v), 10, 64)
	return i
}

// acquire answers as acquire.lua: ARGV limit, weight, ttl, id, proposed,
// owner, ...
func (n *fakeNode) acquire(argv []any) []any {
	limit, weight, id, proposed, owner := integer(argv[0]), integer(argv[1]), fmt.Sprint(argv[3]), fmt.Sprint(argv[4]), fmt.Sprint(argv[5])
	inUse := int64(0)
	for _, l := range n.leases {
		inUse += l.weight
	}
	if l, ok := n.leases[id]; ok && l.owner == owner {
		return []any{int64(1), l.token, l.weight, limit - inUse, int64(1)}
	}
	if n.full || inUse+weight > limit {
		return []any{int64(0), int64(1000), inUse, int64(1), "", int64(0), limit}
	}
	tok := proposed
	if n.grant != "" {
		tok = n.grant
	}
	n.leases[id] = fakeLease{token: tok, weight: weight, owner: owner}
	return []any{int64(1), tok, weight, limit - inUse - weight, int64(0)}
}

// release answers as release.lua: ARGV id, token ("": any), ...
func (n *fakeNode) release(argv []any) any {
	id, tok := fmt.Sprint(argv[0]), fmt.Sprint(argv[1])
	l, ok := n.leases[id]
	if !ok || tok != "" && tok != l.token {
		return int64(0)
	}
	delete(n.leases, id)
	return l.weight
}

// writeBack answers as settoken.lua: ARGV id, token, own.
func (n *fakeNode) writeBack(argv []any) any {
	id, tok, own := fmt.Sprint(argv[0]), fmt.Sprint(argv[1]), fmt.Sprint(argv[2])
	l, ok := n.leases[id]
	if !ok || l.token != own {
		return int64(0)
	}
	l.token = tok
	n.leases[id] = l
	return int64(1)
}

// refresh answers as refresh.lua: ARGV n, then n × (id, token, ttl).
func (n *fakeNode) refresh(argv []any) []any {
	var out []any
	for i := range int(integer(argv[0])) {
		id, tok := fmt.Sprint(argv[1+3*i]), fmt.Sprint(argv[2+3*i])
		if l, ok := n.leases[id]; ok && l.token == tok {
			out = append(out, int64(1))
		} else {
			out = append(out, int64(0))
		}
	}
	return out
}

// resume answers as resume.lua: ARGV id, token, ttl, owner, proposed.
func (n *fakeNode) resume(argv []any) any {
	id, tok, owner, proposed := fmt.Sprint(argv[0]), fmt.Sprint(argv[1]), fmt.Sprint(argv[3]), fmt.Sprint(argv[4])
	l, ok := n.leases[id]
	if !ok || l.token != tok {
		return int64(0)
	}
	l.owner, l.token = owner, proposed
	if n.grant != "" {
		l.token = n.grant
	}
	n.leases[id] = l
	return []any{l.weight, l.token}
}

// Errors a node may fail with: one it answered (a Redis error reply),
// which leaves it up, and one that never reached it, which marks it down.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}

// eventually fails the test unless cond holds within 2s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 2s: %s", what)
		}
	}
}

// mutex is the keyspace of a mutex (limit 1) named name.
func mutex(name string) store.Keyspace { return store.NewKeyspace("t:", name, 1) }

func acquireReq(id string) store.AcquireRequest {
	return store.AcquireRequest{Limit: 1, Weight: 1, TTL: 10 * time.Second, ID: id, Owner: "me"}
}

func addrs(ns []*fakeNode) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.addr)
	}
	return slices.Clip(out)
}
