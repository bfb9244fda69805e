// Package redisstore keeps leases in one Redis deployment: a node, a Sentinel
// failover client, a Cluster or a Ring (every key of a semaphore is in one
// slot). It holds every Redis command and Lua script of limiter: each
// script's .lua file sits beside the Go function that calls it, with its
// KEYS/ARGV contract at the top, and every script goes through one send
// ladder (send.go: FCALL, FCALL once the library is loaded, EVALSHA,
// EVAL). A quorum (package quorum) is N of these Stores.
package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter/internal/store"
)

// Store keeps leases in one Redis deployment.
type Store struct {
	rdb redis.UniversalClient
	dep deployment
	// fifo grants in queue order; a quorum's nodes do not (see acquire.lua).
	fifo bool
	// Boxing a script argument allocates (a string, an int above 255):
	// these box once what a Client repeats in every call, its owner id
	// and channel (a Store serves one Client), and its first TTL in ms
	// (the quarantine defaults to it).
	owner, channel firstBox[string, any]
	ms             firstBox[int64, any]
	// functionsOff: until when (Unix ns) calls go by EVALSHA, not FCALL:
	// for ever once the server refused functions (Redis before 7, an ACL
	// without FCALL or FUNCTION LOAD, a fake), and for loadRetry after it
	// answered a load with an error (out of memory, say), so that a
	// library it will not take costs one load a minute, not one a call.
	functionsOff atomic.Int64
	// loads counts the library loads tried, loaded whether the last one
	// succeeded, and loading lets one run at a time: the calls that found
	// the library missing at once (after a flush, a restart, a failover)
	// load it once, not each, and a load that failed (a master down) is
	// not tried again by every call queued behind it.
	loads   atomic.Uint64
	loaded  atomic.Bool
	loading chan struct{}
	// down: the Cluster nodes that did not answer lately (unreachable.go).
	down unreachable
}

var _ store.Store = (*Store)(nil)

// New returns the Store of rdb. fifo: grant in queue order (a single
// deployment); a quorum's nodes do not (see acquire.lua).
func New(rdb redis.UniversalClient, fifo bool) *Store {
	return &Store{rdb: rdb, dep: deploymentOf(rdb), fifo: fifo, loading: make(chan struct{}, 1)}
}

// Addr names the deployment in errors, and tells two apart.
func (s *Store) Addr() string { return s.dep.addr }

// Ping asks the deployment for a PONG: a quorum's probe of a node it
// found down.
func (s *Store) Ping(ctx context.Context) error { return s.rdb.Ping(ctx).Err() }

// BoundedByCtx: go-redis puts a context's deadline on the socket only with
// ContextTimeoutEnabled, so that a call to a stopped server returns by it.
func (s *Store) BoundedByCtx() bool { return s.dep.ctxTimeout }

// GrantsDirectly: a release grants queued waiters their leases where the
// queue is served in order.
func (s *Store) GrantsDirectly() bool { return s.fifo }

// deployment is what a Store needs to know of its go-redis client's kind,
// read once: the one place that tells the kinds apart.
type deployment struct {
	addr string
	// oneNode: every key is on one server (a node, or a Sentinel's
	// master), so one script may touch the keys of many names.
	oneNode     bool
	ctxTimeout  bool
	readTimeout time.Duration
	// masters runs fn on every master of a Cluster or shard of a Ring, in
	// parallel (so fn locks what it shares), or once on any other client.
	masters func(ctx context.Context, fn func(ctx context.Context, c redis.UniversalClient) error) error
	// nodeFor returns the client of the node whose master serves key: its
	// pipelines run on one connection (nil: not a client WAIT can follow a
	// script with).
	nodeFor func(ctx context.Context, key string) (*redis.Client, error)
	// reload makes a Cluster client read its slot map again (nil elsewhere).
	reload func(ctx context.Context)
}

func deploymentOf(rdb redis.UniversalClient) deployment {
	d := deployment{
		addr: fmt.Sprintf("%T(%p)", rdb, rdb),
		masters: func(ctx context.Context, fn func(context.Context, redis.UniversalClient) error) error {
			return fn(ctx, rdb)
		},
	}
	each := func(fn func(context.Context, redis.UniversalClient) error) func(context.Context, *redis.Client) error {
		return func(ctx context.Context, c *redis.Client) error { return fn(ctx, c) }
	}
	switch c := rdb.(type) {
	case *redis.Client:
		o := c.Options()
		d.addr, d.ctxTimeout, d.readTimeout = o.Addr, o.ContextTimeoutEnabled, o.ReadTimeout
		d.oneNode = true
		d.nodeFor = func(context.Context, string) (*redis.Client, error) { return c, nil }
	case *redis.ClusterClient:
		o := c.Options()
		addrs := slices.Clone(o.Addrs)
		slices.Sort(addrs)
		d.addr, d.ctxTimeout, d.readTimeout = "cluster("+strings.Join(addrs, ",")+")", o.ContextTimeoutEnabled, o.ReadTimeout
		d.masters = func(ctx context.Context, fn func(context.Context, redis.UniversalClient) error) error {
			return c.ForEachMaster(ctx, each(fn))
		}
		d.nodeFor = c.MasterForKey
		d.reload = c.ReloadState
	case *redis.Ring:
		o := c.Options()
		d.ctxTimeout, d.readTimeout = o.ContextTimeoutEnabled, o.ReadTimeout
		d.masters = func(ctx context.Context, fn func(context.Context, redis.UniversalClient) error) error {
			return c.ForEachShard(ctx, each(fn))
		}
		d.nodeFor = func(_ context.Context, key string) (*redis.Client, error) { return c.GetShardClientForKey(key) }
	}
	return d
}

// flag boxes b without allocating, as constant strings are.
func flag(b bool) any {
	if b {
		return "1"
	}
	return "0"
}

// queueTTLms is boxed once; see Store.
var queueTTLms any = store.QueueTTL.Milliseconds()

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
