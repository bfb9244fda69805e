package limiter

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter/internal/redisstore"
	"github.com/redsem/redsem/limiter/internal/store"
)

// Client owns everything of redsem that outlives one call, for one Redis
// deployment (or one Redlock node set): the refresher that keeps its
// leases and queue entries alive, the pub/sub subscription that delivers
// wake-ups for every name it waits on (one connection per node, or per
// master of a Cluster: see the package doc), and the leases it holds. Semaphores and mutexes made from it are cheap
// values. Make one per deployment and process, and Close it when done.
// A Client is safe for concurrent use.
type Client struct {
	st      store.Store
	cfg     config        // defaults of its semaphores
	id      string        // owner of its leases in Redis
	seq     atomic.Uint64 // numbers the ids it makes up (newID)
	channel string        // where releases wake its waiters (but see hub)

	ctx    context.Context // ends at Close
	cancel context.CancelFunc

	// running counts the goroutines it started; idle, when set, is closed
	// when that count drops to zero (a WaitGroup may not be added to
	// while Close waits on it, and spawns race with Close).
	goMu    sync.Mutex
	running int
	idle    chan struct{}

	refresher  *refresher
	uses       *uses // the limits it applies, which the refresher records
	hub        *hub
	eviction   evictionCheck
	quarantine quarantineNotice
	// fewReplicas: see replicas.go.
	fewReplicas fewReplicasNotice

	ids *ids // its lease ids: the live leases, and what a retry may take back
}

// New returns a Client of rdb: a plain, Sentinel failover or Cluster
// client of go-redis, which the Client uses but does not close. The
// options are the defaults of every semaphore made from it. Invalid
// arguments give an *ArgumentError naming them. Nothing is sent to Redis
// until a semaphore is used.
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if isNil(rdb) {
		return nil, argError("rdb", rdb, "must not be nil")
	}
	return newClient(opts, func(*Client) store.Store { return redisstore.New(rdb, true) })
}

func newClient(opts []Option, open func(*Client) store.Store) (*Client, error) {
	cfg, err := with(defaultConfig(), opts)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, id: uuid.NewString(), ids: newIDs()}
	c.channel = cfg.prefix + "wake:" + c.id
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.eviction.turn = make(chan struct{}, 1)
	c.st = open(c)
	if err := c.canWait(c.cfg.replicas); err != nil {
		c.cancel()
		return nil, err
	}
	c.refresher = newRefresher(c)
	c.uses = newUses(c)
	c.hub = newHub(c)
	return c, nil
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// Semaphore returns the semaphore of limit permits named name. The
// Client's options apply, then opts. Invalid arguments give an
// *ArgumentError naming them; after Close, ErrClosed. Nothing is sent to
// Redis.
func (c *Client) Semaphore(name string, limit int64, opts ...NameOption) (*Semaphore, error) {
	if name == "" {
		return nil, argError("name", `""`, "must not be empty")
	}
	if limit < 1 || limit > maxLimit {
		return nil, argError("limit", limit, fmt.Sprintf("must be between 1 and %d", int64(maxLimit)))
	}
	cfg, err := with(c.cfg, opts)
	if err == nil {
		err = c.canWait(cfg.replicas)
	}
	if err != nil {
		return nil, err
	}
	cfg.learn = cfg.learn.Within(limit)
	if c.closedErr() != nil {
		return nil, ErrClosed
	}
	keys := store.NewKeyspace(cfg.prefix, name, limit)
	return &Semaphore{c: c, name: name, limit: limit, cfg: cfg, keys: keys, wake: keys.WakeChannel(c.id)}, nil
}

// Mutex returns the mutex named name: the Semaphore of one permit, with
// the same leases, fencing tokens, handover, queue and errors (an
// *ArgumentError, or ErrClosed after Close).
func (c *Client) Mutex(name string, opts ...NameOption) (*Semaphore, error) {
	return c.Semaphore(name, 1, opts...)
}

// closedErr returns ErrClosed once Close began, else nil.
func (c *Client) closedErr() error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	return nil
}

// Close ends every wait of the Client with ErrClosed, releases every
// lease it holds (bounded by ctx: a lease whose release does not finish
// in time comes back at its TTL), closes its pub/sub connections and
// returns once every goroutine it started has exited, or ctx ended. It
// returns the releases' failures joined, or ctx's error. Later calls
// return nil at once; the go-redis client is left open. A nil ctx gives
// an *ArgumentError and closes nothing.
func (c *Client) Close(ctx context.Context) error {
	if ctx == nil {
		return argError("ctx", nil, "must not be nil")
	}
	held, first := c.ids.close()
	if !first {
		return nil
	}
	c.cancel() // ends waits, the refresher and the subscription
	c.refresher.close()

	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	todo := make(chan *Lease)
	for range min(len(held), 16) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range todo {
				if err := l.Release(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, l := range held {
		if l.isDetached() {
			continue
		}
		if ctx.Err() != nil {
			l.end(errReleased, false) // left to its TTL
			continue
		}
		todo <- l
	}
	close(todo)
	wg.Wait()

	select {
	case <-c.whenIdle():
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("limiter: close: %w", context.Cause(ctx)))
	}
	return errors.Join(errs...)
}

// newID makes up a lease or wait id: unique because the Client's id is a
// random UUID, and cheaper than a UUID per acquisition (no read of the
// system's random source on the common path). Ids need not be secret: a
// lease is released or taken over only with its token.
func (c *Client) newID() string {
	return c.id + "." + strconv.FormatUint(c.seq.Add(1), 36)
}

// spawn runs fn in a goroutine that Close waits for.
func (c *Client) spawn(fn func()) {
	c.goMu.Lock()
	c.running++
	c.goMu.Unlock()
	go func() {
		defer c.exited()
		fn()
	}()
}

func (c *Client) exited() {
	c.goMu.Lock()
	defer c.goMu.Unlock()
	if c.running--; c.running == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// whenIdle returns a channel closed once none of the Client's goroutines
// runs.
func (c *Client) whenIdle() <-chan struct{} {
	c.goMu.Lock()
	defer c.goMu.Unlock()
	if c.running == 0 {
		done := make(chan struct{})
		close(done)
		return done
	}
	if c.idle == nil {
		c.idle = make(chan struct{})
	}
	return c.idle
}

// releaseTimeoutDefault bounds a release that Do, Run or Release make on
// their own: a release that cannot finish lets the lease lapse at its TTL.
const releaseTimeoutDefault = time.Second

// canWait reports, as an *ArgumentError, why the store cannot keep
// WaitReplicas w.
func (c *Client) canWait(w store.ReplicaWait) error {
	if err := c.st.CanWait(w); err != nil {
		return argError("WaitReplicas", fmt.Sprintf("(%d, %v)", w.N, w.Timeout), err.Error())
	}
	return nil
}

// bounded runs fn, a store call with ctx, so that it returns by ctx's
// deadline. When the store honours that deadline by itself (see
// store.Store.BoundedByCtx) fn runs on the caller's goroutine: handing the
// call to a goroutine and back costs about 30 µs on a loaded 2-core
// machine, a fifth of an uncontended acquire and release (docs/benchmarks-history.md).
func bounded[T any](c *Client, ctx context.Context, fn func() (T, error)) (T, error) {
	if c.st.BoundedByCtx() {
		return fn()
	}
	return store.Within(ctx, c.spawn, fn)
}
