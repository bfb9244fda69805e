package main

// The scenarios, shared by main.go (one fixed-size run, printed as a table)
// and bench_test.go (go test -bench, sized by b.N).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter"
)

const (
	// lockTTL is the lease/lock lifetime for every library, so none has a
	// cheaper expiry to manage.
	lockTTL = 10 * time.Second
	// hold is how long a contended holder keeps the lock.
	hold = time.Millisecond
	// workers is the number of goroutines competing in the contended and
	// semaphore scenarios.
	workers = 8
	// semLimit is the permits of the semaphore scenario.
	semLimit = 3
)

// errGaveUp is what a Locker returns when its library stopped waiting
// (redsync ran out of tries, redislock's or redsem's wait timed out). The
// contended scenarios count it and try again.
var errGaveUp = errors.New("library gave up waiting")

// Unlock releases what a Locker obtained.
type Unlock func(ctx context.Context) error

// Locker obtains the lock once (waiting, if the library's configuration
// waits).
type Locker func(ctx context.Context) (Unlock, error)

// Lib is one library in one configuration.
type Lib struct {
	Name   string // row label
	Config string // how it is set up, printed with the results
	// Sends lists the plain commands the library sends itself, as Redis
	// names them in INFO commandstats, besides the ones every library may
	// send (see alwaysClient). Commands its Lua scripts call are counted by
	// Redis under their own names too, so only a name no script of the
	// library calls can be listed here.
	Sends []string
	// OwnClient gives every worker its own Proc (*redis.Client, and for
	// redsem its own limiter.Client), as separate processes would have.
	OwnClient bool
	// New returns a Locker of the lock named key, for process p.
	New func(p *Proc, key string) (Locker, error)
}

// Proc is one simulated process: its go-redis client and, made on first
// use, its redsem Client (one per process and Redis, as redsem asks).
type Proc struct {
	RDB *redis.Client
	lim *limiter.Client
	// Nodes are the independent nodes of the Redlock table (RDB the
	// first), and rl the process's Redlock Client over them.
	Nodes []*redis.Client
	rl    *limiter.Client
}

// Redlock returns the process's Redlock Client over its Nodes, made on
// first use, with the quarantine off as Limiter's.
func (p *Proc) Redlock() (*limiter.Client, error) {
	if p.rl == nil {
		nodes := make([]redis.UniversalClient, len(p.Nodes))
		for i, n := range p.Nodes {
			nodes[i] = n
		}
		c, err := limiter.NewRedlock(nodes, limiter.RestartQuarantine(0))
		if err != nil {
			return nil, err
		}
		p.rl = c
	}
	return p.rl, nil
}

// Limiter returns the process's redsem Client, made on first use. Lockers
// are made on one goroutine, so this needs no lock.
func (p *Proc) Limiter() (*limiter.Client, error) {
	if p.lim == nil {
		// The bench starts its Redis for the run, so no lease can have
		// been forgotten in a restart: the quarantine would only delay
		// each name's first grant.
		c, err := limiter.New(p.RDB, limiter.RestartQuarantine(0))
		if err != nil {
			return nil, err
		}
		p.lim = c
	}
	return p.lim, nil
}

// Close closes the redsem Client, if any (it waits for its goroutines and
// closes its pub/sub connection), then the go-redis client.
func (p *Proc) Close() error {
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []*limiter.Client{p.lim, p.rl} {
		if c != nil {
			if err := c.Close(ctx); err != nil {
				errs = append(errs, fmt.Errorf("redsem Client.Close: %w", err))
			}
		}
	}
	errs = append(errs, p.RDB.Close())
	for _, n := range p.Nodes[min(1, len(p.Nodes)):] { // the first is RDB
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}

// closeProc closes p at the end of a run, reporting a failure in *err
// unless the run already failed.
func closeProc(p *Proc, err *error) {
	if cerr := p.Close(); cerr != nil && *err == nil {
		*err = cerr
	}
}

// alwaysClient are the commands that only ever come from a client: script
// calls, pub/sub and PING. None of the libraries' scripts call them.
var alwaysClient = []string{
	"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro",
	"subscribe", "ssubscribe", "psubscribe", "unsubscribe", "sunsubscribe", "punsubscribe",
	"ping", "script|load",
}

// UncontendedLibs lock and unlock with one goroutine and nobody else on the
// lock: one attempt each.
var UncontendedLibs = []Lib{
	{
		Name:   "ping2",
		Config: "baseline: 2 PINGs per op (2 round trips), same client",
		New: func(p *Proc, _ string) (Locker, error) {
			rdb := p.RDB
			return func(ctx context.Context) (Unlock, error) {
				if err := rdb.Ping(ctx).Err(); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error { return rdb.Ping(ctx).Err() }, nil
			}, nil
		},
	},
	{
		Name:   "redsem",
		Config: "Mutex TryAcquire + Release; TTL 10s, auto-refresh TTL/3",
		New:    redsemTry(),
	},
	{
		Name:   "redsem refresh-off",
		Config: "Mutex TryAcquire + Release; TTL 10s, RefreshInterval(0)",
		New:    redsemTry(limiter.RefreshInterval(0)),
	},
	{
		Name:   "redsem Acquire",
		Config: "Mutex Acquire (waiting API, free lock) + Release; TTL 10s",
		New:    redsemWait(limiter.TTL(lockTTL)),
	},
	{
		Name:   "redsync",
		Config: "Mutex Lock + Unlock, 1 goredis/v9 pool, WithExpiry(10s)",
		Sends:  []string{"set"},
		New:    redsyncLock(redsync.WithExpiry(lockTTL)),
	},
	{
		Name:   "redislock",
		Config: "Obtain(ttl 10s, no retry) + Release",
		New:    redislockObtain(nil),
	},
}

// BusyScenario: one attempt on a mutex another process holds, the cost
// of being told no.
const BusyScenario = "busy try"

// BusyLibs try once, without waiting.
var BusyLibs = []Lib{
	{
		Name:   "redsem",
		Config: "Mutex TryAcquire on a held mutex (ErrBusy)",
		New:    redsemTry(),
	},
	{
		Name:   "redsync",
		Config: "Mutex Lock, WithTries(1), on a held mutex (ErrTaken)",
		Sends:  []string{"set"},
		New:    redsyncLock(redsync.WithExpiry(lockTTL), redsync.WithTries(1)),
	},
	{
		Name:   "redislock",
		Config: "Obtain, no retry, on a held key (ErrNotObtained)",
		New:    redislockObtain(nil),
	},
}

// ContendedLibs wait for a held mutex.
var ContendedLibs = []Lib{
	{
		Name:   "redsem",
		Config: "Mutex Acquire (pub/sub wake-up) + Release; TTL 10s",
		New:    redsemWait(),
	},
	{
		Name:      "redsem 8 clients",
		Config:    "as redsem, but each worker has its own go-redis client and redsem Client (like 8 processes: 8 subscriptions)",
		OwnClient: true,
		New:       redsemWait(),
	},
	{
		Name:   "redsync default",
		Config: "Lock, defaults: 32 tries, random 50-250ms retry delay; WithExpiry(10s)",
		Sends:  []string{"set"},
		New:    redsyncLock(redsync.WithExpiry(lockTTL)),
	},
	{
		Name:   "redsync 10ms",
		Config: "Lock, WithRetryDelay(10ms), WithTries(1000); WithExpiry(10s)",
		Sends:  []string{"set"},
		New:    redsyncLock(redsync.WithExpiry(lockTTL), redsync.WithRetryDelay(10*time.Millisecond), redsync.WithTries(1000)),
	},
	{
		Name:   "redislock linear",
		Config: "Obtain ttl 10s, RetryStrategy LinearBackoff(10ms)",
		New:    redislockObtain(func() redislock.RetryStrategy { return redislock.LinearBackoff(10 * time.Millisecond) }),
	},
	{
		Name:   "redislock exp",
		Config: "Obtain ttl 10s, RetryStrategy ExponentialBackoff(16ms, 256ms)",
		New: redislockObtain(func() redislock.RetryStrategy {
			return redislock.ExponentialBackoff(16*time.Millisecond, 256*time.Millisecond)
		}),
	},
}

// SemaphoreLib is redsem's semaphore of semLimit permits (the peers have
// no semaphore).
var SemaphoreLib = Lib{
	Name:   "redsem",
	Config: fmt.Sprintf("Semaphore limit %d, Acquire + Release; TTL 10s", semLimit),
	New:    redsemSemaphore(semLimit),
}

// redsemSemaphore makes redsem Semaphores of limit permits, waiting with
// Acquire.
func redsemSemaphore(limit int64) func(*Proc, string) (Locker, error) {
	return func(p *Proc, key string) (Locker, error) {
		c, err := p.Limiter()
		if err != nil {
			return nil, err
		}
		s, err := c.Semaphore(key, limit, limiter.TTL(lockTTL))
		if err != nil {
			return nil, err
		}
		return redsemLocker(s.Acquire), nil
	}
}

func redsemTry(opts ...limiter.NameOption) func(*Proc, string) (Locker, error) {
	return func(p *Proc, key string) (Locker, error) {
		m, err := redsemMutex(p, key, opts)
		if err != nil {
			return nil, err
		}
		return redsemLocker(m.TryAcquire), nil
	}
}

func redsemWait(opts ...limiter.NameOption) func(*Proc, string) (Locker, error) {
	return func(p *Proc, key string) (Locker, error) {
		m, err := redsemMutex(p, key, opts)
		if err != nil {
			return nil, err
		}
		return redsemLocker(m.Acquire), nil
	}
}

// redsemMutex is the mutex named key of p's redsem Client, TTL lockTTL.
func redsemMutex(p *Proc, key string, opts []limiter.NameOption) (*limiter.Semaphore, error) {
	c, err := p.Limiter()
	if err != nil {
		return nil, err
	}
	return c.Mutex(key, append([]limiter.NameOption{limiter.TTL(lockTTL)}, opts...)...)
}

func redsemLocker(acquire func(context.Context, ...limiter.AcquireOption) (*limiter.Lease, error)) Locker {
	return func(ctx context.Context) (Unlock, error) {
		l, err := acquire(ctx)
		if errors.Is(err, limiter.ErrTimeout) {
			return nil, errGaveUp
		}
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
}

func redsyncLock(opts ...redsync.Option) func(*Proc, string) (Locker, error) {
	return redsyncOn(func(p *Proc) []redsyncredis.Pool { return []redsyncredis.Pool{goredis.NewPool(p.RDB)} }, opts...)
}

// redsyncOn makes redsync Mutexes over the pools of a process: one pool,
// or one per node (redsync's Redlock).
func redsyncOn(pools func(*Proc) []redsyncredis.Pool, opts ...redsync.Option) func(*Proc, string) (Locker, error) {
	return func(p *Proc, key string) (Locker, error) {
		// A redsync.Mutex keeps the value it locked with, so each Locker
		// (one per worker) has its own, as redsync's examples do.
		m := redsync.New(pools(p)...).NewMutex(key, opts...)
		return func(ctx context.Context) (Unlock, error) {
			err := m.LockContext(ctx)
			var taken *redsync.ErrTaken
			if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
				return nil, errGaveUp
			}
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) error {
				ok, err := m.UnlockContext(ctx)
				if err == nil && !ok {
					err = errors.New("redsync: unlock reported not held")
				}
				return err
			}, nil
		}, nil
	}
}

// redislockObtain waits with a fresh strategy from retry per Obtain (the
// exponential one counts its attempts); nil retry means one attempt.
func redislockObtain(retry func() redislock.RetryStrategy) func(*Proc, string) (Locker, error) {
	return func(p *Proc, key string) (Locker, error) {
		c := redislock.New(p.RDB)
		return func(ctx context.Context) (Unlock, error) {
			var opt *redislock.Options
			if retry != nil {
				opt = &redislock.Options{RetryStrategy: retry()}
			}
			// Without a deadline on ctx, Obtain gives up after the TTL.
			l, err := c.Obtain(ctx, key, lockTTL, opt)
			if retry != nil && (errors.Is(err, redislock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded)) {
				return nil, errGaveUp
			}
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}, nil
	}
}

// Env is one Redis and the clients the scenarios use on it.
type Env struct {
	Addr string
	// Nodes, while the Redlock table runs, are its independent nodes
	// (Addr the first).
	Nodes []string
	admin *redis.Client // INFO only; not counted
	sent  atomic.Int64  // commands passed through the counted clients' hooks
	seq   atomic.Int64
}

func NewEnv(ctx context.Context, addr string) (*Env, error) {
	e := &Env{Addr: addr, admin: redis.NewClient(&redis.Options{Addr: addr})}
	if err := e.admin.Ping(ctx).Err(); err != nil {
		e.admin.Close()
		return nil, fmt.Errorf("redis at %s: %w", addr, err)
	}
	return e, nil
}

func (e *Env) Close() { _ = e.admin.Close() }

// newProc returns a simulated process whose go-redis client's commands
// are counted by a hook, a cross-check of the commandstats count.
func (e *Env) newProc() *Proc {
	c := redis.NewClient(&redis.Options{Addr: e.Addr, ContextTimeoutEnabled: true}) // as README advises; the peers honour ctx too
	c.AddHook(countHook{&e.sent})
	return &Proc{RDB: c}
}

// key returns a lock name used by no earlier run, so no state (keys,
// lingering subscriptions) carries over between scenarios.
func (e *Env) key(lib string) string {
	return fmt.Sprintf("bench:%s:%d:%d", strings.ReplaceAll(lib, " ", "-"), time.Now().UnixNano(), e.seq.Add(1))
}

// countHook counts the commands a client sends, except connection setup
// (HELLO, CLIENT SETINFO), which Redis 7.0 does not always count.
type countHook struct{ n *atomic.Int64 }

func setupCmd(name string) bool { return name == "hello" || name == "client" }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !setupCmd(cmd.Name()) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if !setupCmd(c.Name()) {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// cmdStat is one line of INFO commandstats.
type cmdStat struct{ calls, usec int64 }

// commandStats reads calls and time per command from INFO commandstats.
func (e *Env) commandStats(ctx context.Context) (map[string]cmdStat, error) {
	return readCommandStats(ctx, e.admin)
}

// readCommandStats reads rdb's INFO commandstats: calls and time per
// command, by lower-case name.
func readCommandStats(ctx context.Context, rdb *redis.Client) (map[string]cmdStat, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	stats := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		var st cmdStat
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			var dst *int64
			switch k {
			case "calls":
				dst = &st.calls
			case "usec":
				dst = &st.usec
			default:
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("commandstats line %q: %v", line, err)
			}
			*dst = n
		}
		stats[strings.ToLower(name)] = st
	}
	return stats, nil
}

// counts is what a run cost Redis.
type counts struct {
	client  int64 // commands the clients sent (commandstats)
	server  int64 // every command Redis ran, including inside scripts
	usec    int64 // Redis time in the commands the clients sent (a script's includes its calls)
	setup   int64 // connection setup (HELLO, CLIENT SETINFO): in neither client nor server
	pubsub  int64 // (un)subscribe: in client, but not seen by the hooks
	hook    int64 // commands the clients' hooks saw
	perName map[string]int64
}

func (e *Env) snapshot(ctx context.Context) (map[string]cmdStat, int64, error) {
	s, err := e.commandStats(ctx)
	return s, e.sent.Load(), err
}

func (e *Env) diff(ctx context.Context, lib Lib, before map[string]cmdStat, hookBefore int64) (counts, error) {
	after, hookAfter, err := e.snapshot(ctx)
	if err != nil {
		return counts{}, err
	}
	c := counts{hook: hookAfter - hookBefore, perName: map[string]int64{}}
	for name, st := range after {
		d := st.calls - before[name].calls
		switch {
		case d == 0 || name == "info" || strings.HasPrefix(name, "config|"):
			continue
		case name == "hello" || strings.HasPrefix(name, "client|"):
			c.setup += d
			continue
		}
		c.perName[name] = d
		c.server += d
		if slices.Contains(alwaysClient, name) || slices.Contains(lib.Sends, name) {
			c.client += d
			c.usec += st.usec - before[name].usec
			if strings.Contains(name, "subscribe") {
				c.pubsub += d
			}
		}
	}
	return c, nil
}

// Timer marks the measured part of a run (b.ResetTimer / b.StopTimer);
// either func may be nil.
type Timer struct{ Start, Stop func() }

func (t Timer) start() {
	if t.Start != nil {
		t.Start()
	}
}

func (t Timer) stop() {
	if t.Stop != nil {
		t.Stop()
	}
}

// Result of one scenario run of one library.
type Result struct {
	Scenario string
	Lib      Lib
	N        int // acquisitions (lock+unlock pairs)
	Elapsed  time.Duration
	// Gap: from a holder's unlock call to the next holder's lock returning
	// (mutex only). Handoff: the same, counting only the acquisitions by a
	// worker other than the one that released.
	GapP50, GapP99         time.Duration
	HandoffP50, HandoffP99 time.Duration
	WaitP50, WaitP99       time.Duration // lock call -> returned
	WaitMax                time.Duration
	Unfinished             int   // waits cut short by the end of the run
	Handoffs, Reacquired   int   // acquisitions by another / the same worker
	GaveUp                 int64 // waits the library abandoned (retried)
	Violations             int64 // acquisitions beyond the limit: must be 0
	MaxHeld                int64
	ClientCmds             int64
	ServerCalls            int64
	ServerUsec             int64
	SetupCmds              int64
	HookCmds               int64
	PubSubCmds             int64
	PerName                map[string]int64
}

func (r Result) OpsPerSec() float64 { return float64(r.N) / r.Elapsed.Seconds() }
func (r Result) PerOp() time.Duration {
	return r.Elapsed / time.Duration(max(r.N, 1))
}
func (r Result) ClientPerOp() float64 { return float64(r.ClientCmds) / float64(max(r.N, 1)) }
func (r Result) ServerPerOp() float64 { return float64(r.ServerCalls) / float64(max(r.N, 1)) }
func (r Result) ServerUsecPerOp() float64 {
	return float64(r.ServerUsec) / float64(max(r.N, 1))
}

// ReacquiredPct is the share of acquisitions (after the first) that went
// straight back to the worker that had just released.
func (r Result) ReacquiredPct() float64 {
	return 100 * float64(r.Reacquired) / float64(max(r.Reacquired+r.Handoffs, 1))
}

// CountsAgree cross-checks commandstats against the clients' hooks, which
// do not see pub/sub commands (nor its health-check PINGs), but do see a
// command that the end of a contended run cancelled before it was sent.
func (r Result) CountsAgree() bool {
	d := r.ClientCmds - r.PubSubCmds - r.HookCmds
	return d >= -workers && d <= 2+r.HookCmds/100
}

func (r Result) withCounts(c counts) Result {
	r.ClientCmds, r.ServerCalls, r.ServerUsec, r.SetupCmds = c.client, c.server, c.usec, c.setup
	r.HookCmds, r.PubSubCmds, r.PerName = c.hook, c.pubsub, c.perName
	return r
}

// RunUncontended does n lock+unlock pairs from one goroutine.
// The process is closed after the counts are taken.
func RunUncontended(ctx context.Context, e *Env, lib Lib, n int, t Timer) (Result, error) {
	return timeOps(ctx, e, lib, e.key(lib.Name), "uncontended", n, t, func(lock Locker) error { return lockUnlock(ctx, lock) })
}

// timeOps times n calls of op on a Locker of lib for key in a process of
// its own, after three to warm up (connection, script cache), and counts
// the commands they cost.
func timeOps(ctx context.Context, e *Env, lib Lib, key, scenario string, n int, t Timer, op func(Locker) error) (_ Result, err error) {
	p := e.newProc()
	defer closeProc(p, &err)
	lock, err := lib.New(p, key)
	if err != nil {
		return Result{}, err
	}
	for range 3 {
		if err := op(lock); err != nil {
			return Result{}, fmt.Errorf("%s warm-up: %w", lib.Name, err)
		}
	}
	before, hookBefore, err := e.snapshot(ctx)
	if err != nil {
		return Result{}, err
	}
	t.start()
	start := time.Now()
	for i := range n {
		if err := op(lock); err != nil {
			return Result{}, fmt.Errorf("%s op %d: %w", lib.Name, i, err)
		}
	}
	elapsed := time.Since(start)
	t.stop()
	c, err := e.diff(ctx, lib, before, hookBefore)
	if err != nil {
		return Result{}, err
	}
	return Result{Scenario: scenario, Lib: lib, N: n, Elapsed: elapsed}.withCounts(c), nil
}

// RunBusy has another process hold the lock with lib, then times n
// attempts of lib that must each be refused.
func RunBusy(ctx context.Context, e *Env, lib Lib, n int) (_ Result, err error) {
	key := e.key(lib.Name)
	holder := e.newProc()
	defer closeProc(holder, &err)
	hold, err := lib.New(holder, key)
	if err != nil {
		return Result{}, err
	}
	unlock, err := hold(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("%s holder: %w", lib.Name, err)
	}
	defer func() { _ = unlock(ctx) }()
	return timeOps(ctx, e, lib, key, BusyScenario, n, Timer{}, func(lock Locker) error {
		_, err := lock(ctx)
		switch {
		case err == nil:
			return errors.New("granted a held lock")
		case errors.Is(err, limiter.ErrBusy), errors.Is(err, errGaveUp), errors.Is(err, redislock.ErrNotObtained):
			return nil
		}
		return err
	})
}

func lockUnlock(ctx context.Context, lock Locker) error {
	unlock, err := lock(ctx)
	if err != nil {
		return err
	}
	return unlock(ctx)
}

// Contention is a contended scenario: workers goroutines each loop
// lock -> hold -> unlock -> think.
type Contention struct {
	Name  string
	Limit int64         // permits of the lock: 1 for a mutex
	Think time.Duration // pause after unlock before the next lock
}

var (
	// MutexLoop is the plain loop: a worker asks again right after its
	// unlock, so it competes with the waiters for the lock it just freed.
	MutexLoop = Contention{Name: "contended mutex", Limit: 1}
	// MutexThink pauses 2ms after each unlock, so the lock goes to a
	// waiter unless a poller leaves it idle for 2ms.
	MutexThink = Contention{Name: "mutex +2ms think", Limit: 1, Think: 2 * time.Millisecond}
	// SemaphoreLoop is the plain loop on semLimit permits.
	SemaphoreLoop = Contention{Name: fmt.Sprintf("semaphore %d/%d", semLimit, workers), Limit: semLimit}
)

// RunContended runs sc until n acquisitions were made in all, or maxDur
// passed (0 = no cap), then cancels the workers still waiting; Result.N
// says how many were made. Waits cut short that way count in the wait
// percentiles with the time waited so far (a lower bound), so a library
// that starves a waiter cannot hide it by leaving it waiting at the end.
// The processes are closed at the end, after the counts are taken.
func RunContended(ctx context.Context, e *Env, sc Contention, lib Lib, n int, maxDur time.Duration, t Timer) (_ Result, err error) {
	key := e.key(lib.Name)
	shared := e.newProc()
	defer closeProc(shared, &err)
	lockers := make([]Locker, workers)
	for w := range lockers {
		p := shared
		if lib.OwnClient {
			p = e.newProc()
			defer closeProc(p, &err)
		}
		l, err := lib.New(p, key)
		if err != nil {
			return Result{}, err
		}
		// Warm up each worker's connection and the script cache.
		if err := lockUnlock(ctx, l); err != nil {
			return Result{}, fmt.Errorf("%s warm-up: %w", lib.Name, err)
		}
		lockers[w] = l
	}
	before, hookBefore, err := e.snapshot(ctx)
	if err != nil {
		return Result{}, err
	}

	var (
		acquired, gaveUp, violations, held, maxHeld atomic.Int64
		// lastRelease is when the last holder called unlock (ns since t0,
		// +1 so that 0 means none yet), lastHolder which worker it was.
		lastRelease, lastHolder atomic.Int64
		mu                      sync.Mutex
		gaps, handoffs, waits   []time.Duration
		unfinished              int
		firstErr                error
		elapsed                 time.Duration
		wg                      sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	t.start()
	t0 := time.Now()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var once sync.Once
	finish := func() {
		once.Do(func() {
			elapsed = time.Since(t0)
			cancel()
		})
	}
	if maxDur > 0 {
		stop := time.AfterFunc(maxDur, finish)
		defer stop.Stop()
	}
	// Unlocks are not cut short: a lease left behind would only expire.
	unlockCtx := context.WithoutCancel(ctx)
	for w := range workers {
		wg.Add(1)
		go func(w int, lock Locker) {
			defer wg.Done()
			var myGaps, myHandoffs, myWaits []time.Duration
			myUnfinished := 0
			defer func() {
				mu.Lock()
				gaps, handoffs, waits = append(gaps, myGaps...), append(handoffs, myHandoffs...), append(waits, myWaits...)
				unfinished += myUnfinished
				mu.Unlock()
			}()
			for runCtx.Err() == nil {
				asked := time.Now()
				var unlock Unlock
				for {
					var err error
					if unlock, err = lock(runCtx); err == nil {
						break
					}
					if runCtx.Err() != nil { // the run is over: a censored wait
						myWaits = append(myWaits, time.Since(asked))
						myUnfinished++
						return
					}
					if !errors.Is(err, errGaveUp) {
						fail(fmt.Errorf("%s worker %d: %w", lib.Name, w, err))
						finish()
						return
					}
					gaveUp.Add(1)
				}
				got := time.Since(t0)
				count := acquired.Add(1)
				if count > int64(n) { // another worker made the n-th meanwhile
					_ = unlock(unlockCtx)
					return
				}
				myWaits = append(myWaits, time.Since(asked))
				if h := held.Add(1); h > sc.Limit {
					violations.Add(1)
				} else {
					updateMax(&maxHeld, h)
				}
				if sc.Limit == 1 {
					if lr := lastRelease.Load(); lr != 0 {
						gap := got - time.Duration(lr-1)
						myGaps = append(myGaps, gap)
						if lastHolder.Load() != int64(w) {
							myHandoffs = append(myHandoffs, gap)
						}
					}
				}
				time.Sleep(hold)
				held.Add(-1)
				if sc.Limit == 1 {
					lastHolder.Store(int64(w))
					lastRelease.Store(int64(time.Since(t0)) + 1)
				}
				if err := unlock(unlockCtx); err != nil {
					fail(fmt.Errorf("%s worker %d unlock: %w", lib.Name, w, err))
					finish()
					return
				}
				if count == int64(n) {
					finish()
					return
				}
				if sc.Think > 0 {
					time.Sleep(sc.Think)
				}
			}
		}(w, lockers[w])
	}
	wg.Wait()
	t.stop()
	if firstErr != nil {
		return Result{}, firstErr
	}
	c, err := e.diff(ctx, lib, before, hookBefore)
	if err != nil {
		return Result{}, err
	}
	r := Result{
		Scenario: sc.Name, Lib: lib, N: int(min(acquired.Load(), int64(n))), Elapsed: elapsed,
		Handoffs: len(handoffs), Reacquired: len(gaps) - len(handoffs), Unfinished: unfinished,
		GaveUp: gaveUp.Load(), Violations: violations.Load(), MaxHeld: maxHeld.Load(),
	}
	r.GapP50, r.GapP99 = percentile(gaps, 50), percentile(gaps, 99)
	r.HandoffP50, r.HandoffP99 = percentile(handoffs, 50), percentile(handoffs, 99)
	r.WaitP50, r.WaitP99, r.WaitMax = percentile(waits, 50), percentile(waits, 99), percentile(waits, 100)
	return r.withCounts(c), nil
}

func updateMax(m *atomic.Int64, v int64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}

// percentile returns the p-th percentile (nearest rank) of ds, 0 if empty.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100 // ceil(len*p/100)
	return s[max(i-1, 0)]
}
