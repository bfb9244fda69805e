package limiter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Client owns everything of redsem that outlives one call, for one Redis
// deployment (or one Redlock node set): the refresher that keeps its
// leases and queue entries alive, the one pub/sub subscription (one
// connection per node) that delivers wake-ups for every name it waits on,
// and the leases it holds. Semaphores and mutexes made from it are cheap
// values. Make one per deployment and process, and Close it when done.
// A Client is safe for concurrent use.
type Client struct {
	st      store
	cfg     config        // defaults of its semaphores
	id      string        // owner of its leases in Redis
	seq     atomic.Uint64 // numbers the ids it makes up (newID)
	channel string        // where releases wake its waiters

	ctx    context.Context // ends at Close
	cancel context.CancelFunc

	// running counts the goroutines it started; idle, when set, is closed
	// when that count drops to zero (a WaitGroup may not be added to
	// while Close waits on it, and spawns race with Close).
	goMu    sync.Mutex
	running int
	idle    chan struct{}

	refresher *refresher
	hub       *hub
	eviction  evictionCheck

	mu     sync.Mutex // guards closed, leases and the refresher's state
	closed bool
	leases map[leaseKey]*Lease // live leases: one holder per id
	asking map[leaseKey]int    // attempts and releases in flight, per given id
	given  map[leaseKey]*givenID
	// givenPrune: prune what is known of given ids when the map reaches it.
	givenPrune int
	// reclaiming holds, per id, the one attempt allowed to take such a
	// lease back; other attempts of the id wait for it to finish.
	reclaiming map[leaseKey]chan struct{}
}

type leaseKey struct{ keys, id string }

// ErrClosed is returned by calls on a Client (or its semaphores) after
// Close, and ends the waits that Close interrupts.
var ErrClosed = errors.New("limiter: client closed")

// New returns a Client of rdb: a plain, Sentinel failover or Cluster
// client of go-redis, which the Client uses but does not close. The
// options are the defaults of every semaphore made from it. Invalid
// arguments give an *ArgumentError naming them. Nothing is sent to Redis
// until a semaphore is used.
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if isNil(rdb) {
		return nil, argError("rdb", rdb, "must not be nil")
	}
	return newClient(opts, func(*config) store { return newRedisStore(rdb, true) })
}

func newClient(opts []Option, open func(*config) store) (*Client, error) {
	cfg, err := defaultConfig().with(opts)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, id: uuid.NewString(), leases: map[leaseKey]*Lease{}, asking: map[leaseKey]int{},
		given: map[leaseKey]*givenID{}, givenPrune: givenPruneMin, reclaiming: map[leaseKey]chan struct{}{}}
	c.channel = cfg.prefix + "wake:" + c.id
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.eviction.turn = make(chan struct{}, 1)
	c.st = open(&c.cfg)
	if err := c.st.canWait(c.cfg.replicas); err != nil {
		c.cancel()
		return nil, err
	}
	c.refresher = newRefresher(c)
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
func (c *Client) Semaphore(name string, limit int64, opts ...Option) (*Semaphore, error) {
	if name == "" {
		return nil, argError("name", `""`, "must not be empty")
	}
	if limit < 1 || limit > maxLimit {
		return nil, argError("limit", limit, fmt.Sprintf("must be between 1 and %d", int64(maxLimit)))
	}
	cfg, err := c.cfg.with(opts)
	if err == nil {
		err = c.st.canWait(cfg.replicas)
	}
	if err != nil {
		return nil, err
	}
	if c.Err() != nil {
		return nil, ErrClosed
	}
	return &Semaphore{c: c, name: name, limit: limit, cfg: cfg, keys: newKeyspace(cfg.prefix, name, limit)}, nil
}

// Mutex returns the mutex named name: a Semaphore of one permit, with the
// same errors as Semaphore (an *ArgumentError, or ErrClosed after Close).
func (c *Client) Mutex(name string, opts ...Option) (*Mutex, error) {
	s, err := c.Semaphore(name, 1, opts...)
	if err != nil {
		return nil, err
	}
	return &Mutex{s}, nil
}

// Done is closed when Close begins: from then on, waits end with
// ErrClosed and no new lease is granted through this Client.
func (c *Client) Done() <-chan struct{} { return c.ctx.Done() }

// Err returns ErrClosed once Close began, else nil.
func (c *Client) Err() error {
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
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	held := slices.Collect(maps.Values(c.leases))
	c.mu.Unlock()
	c.cancel() // ends waits, the refresher and the subscription

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
		if l.isHandedOff() {
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

// track records a new lease as live, or reports false once Close began:
// Close has collected the leases it releases, so the caller gives this
// one back itself.
func (c *Client) track(l *Lease) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.leases[leaseKey{l.sem.keys.id(), l.id}] = l
	return true
}

func (c *Client) untrack(l *Lease) {
	c.mu.Lock()
	k := leaseKey{l.sem.keys.id(), l.id}
	if c.leases[k] == l {
		delete(c.leases, k)
	}
	if l.given {
		c.endedLocked(k, l)
	}
	c.mu.Unlock()
}

// releaseTimeoutDefault bounds a release that Do, Run or Release make on
// their own: a release that cannot finish lets the lease lapse at its TTL.
const releaseTimeoutDefault = time.Second
