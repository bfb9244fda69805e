package limiter

import (
	"log/slog"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// Option configures a Client: New and NewRedlock take every Option.
// Invalid values make the constructor return an *ArgumentError naming the
// option.
type Option interface{ apply(*config) }

// NameOption is an Option that also configures one Semaphore or RateLimit
// (Client.Semaphore, Client.Mutex, Client.RateLimit) over its Client's
// value. Given to New, it is the default of the Client's names. A
// NameOption that means nothing to a rate limit (TTL, say) is unused
// there.
type NameOption interface {
	Option
	perName()
}

// clientOption is an Option for New alone; nameOption a NameOption.
type (
	clientOption func(*config)
	nameOption   func(*config)
)

func (o clientOption) apply(c *config) { o(c) }
func (o nameOption) apply(c *config)   { o(c) }
func (nameOption) perName()            {}

type config struct {
	ttl            time.Duration
	refresh        time.Duration
	refreshSet     bool
	acquireTimeout time.Duration
	acquireSet     bool
	prefix         string
	onLost         func(*Lease, error)
	observer       Observer
	logger         *slog.Logger
	clockDrift     float64
	nodeTimeout    time.Duration
	releaseTimeout time.Duration
	maxHold        time.Duration
	allowEviction  bool
	quarantine     time.Duration
	quarantineSet  bool
	replicas       store.ReplicaWait
	learn          store.Learn
	learnSet       bool
}

// Defaults of the TTL and Prefix options.
const (
	DefaultTTL    = 10 * time.Second
	DefaultPrefix = "redsem:"
)

// MinTTL is the shortest TTL accepted. A lease lives from the request
// that granted it less the clock drift allowance (2ms and a hundredth),
// and is kept by refreshes a third of the TTL apart, each a round trip
// that a loaded machine (GC, a busy scheduler, -race) can delay by tens of
// milliseconds: measured under load, 20 leases held 300ms with a 5ms TTL
// lost 19 of 20, with 10ms 40-76%, with 20-30ms a few percent, with
// 50ms none of 600.
const MinTTL = 50 * time.Millisecond

const (
	defaultAcquireTimeout = 10 * time.Second
	// maxTTL bounds the TTL and the RestartQuarantine: a server that
	// restarted grants nothing new for as long.
	maxTTL = 24 * time.Hour
)

func defaultConfig() config {
	return config{
		ttl:            DefaultTTL,
		prefix:         DefaultPrefix,
		clockDrift:     0.01,
		releaseTimeout: releaseTimeoutDefault,
		observer:       noObserver{},
	}
}

// with returns a copy of c with opts applied, validated.
func with[O Option](c config, opts []O) (config, error) {
	for _, o := range opts {
		if Option(o) != nil {
			o.apply(&c)
		}
	}
	return c, c.validate()
}

// TTL sets how long a lease lives in Redis without a refresh (at least
// MinTTL; default 10s,
// at most 24h). It bounds how long a crashed holder keeps its permits, and
// how long a restarted server grants nothing new (RestartQuarantine).
func TTL(d time.Duration) NameOption { return nameOption(func(c *config) { c.ttl = d }) }

// Adaptive makes a Semaphore's limit or a RateLimit's rate learned,
// fleet-wide, from the upstream: it starts at start and moves between
// min and the limit (or the Rate's Events per Per, Burst unchanged) the
// Semaphore or RateLimit is made with. A newcomer that finds every permit
// taken, or a reservation that has to wait, lets it grow by its weight:
// doubling with each round of calls until the first overload, then back
// towards the last overload's value and past it (CUBIC's curve);
// inspect.Inspector.Overload (a 429 or 503: httplimit and asynqmw call it) cuts
// it, once per episode for the whole fleet. One state per name in Redis,
// moved only by the scripts on the server's clock: N processes' signals
// meet there, and every process applies what it holds (a Redis failure
// fails the call, as for a fixed limit). The first Client to learn a name
// sets its bounds; SetLimit or SetRate pins it, and clearing them starts
// the learning again. An overload cuts what was all used (every permit
// taken, or the rate's next event not free), or both when neither was.
// min and start above the limit or Events are taken as it (one Adaptive
// serves an asynqmw or httplimit config of several names); min below 1
// or above start gives an *ArgumentError naming Adaptive. A Redlock Client
// does not learn.
// docs/adaptive.md has the law.
func Adaptive(min, start int64) NameOption {
	return nameOption(func(c *config) { c.learn, c.learnSet = store.Learn{Min: min, Start: start}, true })
}

// RefreshInterval sets how often held leases are extended (default TTL/3,
// which leaves room for two failed attempts before the TTL runs out).
// 0 turns auto-refresh off: the lease then ends at its TTL unless
// Lease.Refresh is called. It must be less than the TTL.
func RefreshInterval(d time.Duration) NameOption {
	return nameOption(func(c *config) { c.refresh, c.refreshSet = d, true })
}

// AcquireTimeout bounds how long Acquire waits (default 10s, or the
// RestartQuarantine plus 2s when that is longer, so that a default Acquire
// on a server that just started waits its quarantine out rather than
// failing; 0 = only the context bounds it). Whichever of it and the
// context ends first wins. An attempt already sent when it runs out may
// finish, for up to NodeTimeout more, and a grant it brings is returned;
// if Redis answered no attempt at all, the error matches ErrTimeout but
// not ErrBusy (a slow Redis is not a full semaphore).
func AcquireTimeout(d time.Duration) NameOption {
	return nameOption(func(c *config) { c.acquireTimeout, c.acquireSet = d, true })
}

// Prefix sets the key prefix of every name of the Client (default
// "redsem:"), and of its wake channel. It must not contain '{' or '}',
// which would break the hash tag that keeps a semaphore in one Cluster
// slot. A Client's alone (make a Client per prefix).
func Prefix(p string) Option { return clientOption(func(c *config) { c.prefix = p }) }

// OnLost registers a callback run (in its own goroutine) when a lease is
// lost while this process keeps it alive: a refresh (automatic or by
// Lease.Refresh) finds it gone from Redis, or no refresh was confirmed
// before its local deadline. It is not called for leases that end at
// their TTL with auto-refresh off, nor after Release.
func OnLost(fn func(l *Lease, err error)) NameOption {
	return nameOption(func(c *config) { c.onLost = fn })
}

// Observe reports acquisitions, waits, held and lost leases, refresh
// failures, a RateLimit's events and the pauses an Inspector set to o
// (limiterprom.NewCollector for Prometheus). A nil o reports nowhere.
func Observe(o Observer) NameOption {
	return nameOption(func(c *config) {
		c.observer = o
		if o == nil {
			c.observer = noObserver{}
		}
	})
}

// Logger sets where the few things worth logging go (lost leases, failed
// subscriptions). Default: slog.Default().
func Logger(l *slog.Logger) NameOption { return nameOption(func(c *config) { c.logger = l }) }

// ClockDrift sets the fraction of the TTL (default 0.01, plus 2ms) by which
// a holder assumes its lease ended earlier than Redis will, so it learns
// of loss before anyone else can take the permit.
func ClockDrift(f float64) NameOption { return nameOption(func(c *config) { c.clockDrift = f }) }

// NodeTimeout bounds each node's answer on a Redlock Client (default
// TTL/3, at most 500ms): a slow or paused node is counted as failed
// rather than holding up the quorum, and Acquire tries again (within
// AcquireTimeout) when too many failed; there only the value given to
// NewRedlock counts. A node that did not answer (refused, timed out) is
// then not asked again until a PING, one per NodeTimeout in the
// background, finds it back. On any Client, a Semaphore's NodeTimeout also bounds
// how long an attempt in flight when AcquireTimeout runs out may still
// take. It must be less than the TTL.
func NodeTimeout(d time.Duration) NameOption {
	return nameOption(func(c *config) { c.nodeTimeout = d })
}

// ReleaseTimeout bounds each release (default 1s): Release, the release
// at the end of Do and Run, and each lease's release in Client.Close. The
// release is detached from the caller's context, so a cancelled caller
// still gives its permits back; one that cannot finish in time lets the
// lease lapse at its TTL.
func ReleaseTimeout(d time.Duration) NameOption {
	return nameOption(func(c *config) { c.releaseTimeout = d })
}

// MaxHold caps how long a lease is kept alive (default 0: no cap). Past it
// the Client stops refreshing the lease, which then ends at its TTL like a
// lease whose holder crashed: its Context ends and Err is ErrLeaseLost, so work
// that hangs cannot hold a permit forever.
func MaxHold(d time.Duration) NameOption { return nameOption(func(c *config) { c.maxHold = d }) }

// RestartQuarantine sets how long a Redis server, after it started, grants
// nothing on a name it holds no state for (default: the TTL; at most 24h;
// 0 turns the quarantine off). The Client logs, once per quarantine at
// Info level, when grants resume there. A server restarted empty (no persistence) forgot
// leases whose holders still believe they hold them until their TTL runs
// out; granting their permits
// again meanwhile would put more holders than the limit at work. So a
// server younger than the quarantine refuses grants on a name that has no
// fencing token yet: an acquisition there waits (or TryAcquire gets a
// *BusyError whose Restarted is set) until the quarantine is over, as the
// Redlock write-up asks of restarted nodes. Names in use since the start
// are unaffected, and the check costs one INFO only on a name's first
// grant. The quarantine ends the RestartQuarantine after the server
// started (known to the second from INFO) or after the server first saw
// the name, whichever is earlier: a key "<prefix>{<name>}:seen" records
// that, written only while the quarantine may still be on and expiring
// with it.
//
// A restart that brings back old state (an RDB snapshot, or AOF with
// appendfsync everysec after a crash) forgets only the latest grants of
// names that still have state: the quarantine does not see those. Use
// appendfsync always where that matters. If the server refuses INFO (an
// ACL), the quarantine is off.
//
// Set it to the longest TTL any process uses on the same names when TTLs
// differ. Turn it off only when a restart cannot lose a grant
// (appendfsync always), or for a test server that nobody held leases on.
func RestartQuarantine(d time.Duration) NameOption {
	return nameOption(func(c *config) { c.quarantine, c.quarantineSet = d, true })
}

// WaitReplicas makes every write that grants or extends a lease wait
// until n replicas have it (Redis WAIT, for at most timeout), so that a
// failover to one of them keeps the lease (default n = 0: no wait). It is
// for a master with replicas: Sentinel, or a Cluster with replicas. A
// Redlock Client rejects it: its nodes are independent, and the quorum
// is what survives losing one. The timeout must be below the TTL and the
// go-redis ReadTimeout (default 3s), which bounds the script's and WAIT's
// replies together: leave the script room.
//
// A grant (Acquire, TryAcquire, Do, Run, Resume) is returned only once
// confirmed. If fewer than n replicas confirmed in time, the lease is
// given back at once (on the master, where it is) and a
// *ReplicationError matching ErrNotReplicated says how many did. Acquire
// does not retry then: replicas that miss a generous timeout are down or
// far behind, retries would grant and undo grants (waking waiters each
// time) until AcquireTimeout, and the caller hears at once, as of any
// Redis failure. A refresh (automatic, or Lease.Refresh, which returns
// the error) that fewer replicas confirmed counts as failed: the local
// deadline is not extended, since a failover could bring back the older
// expiry the replicas have, and the lease is lost at that deadline unless
// a later refresh is confirmed. A reply lost during the wait (ctx ended,
// connection failed) is a lost reply like any other: a grant is given
// back (with ID, left for a retry to reclaim), a refresh failed. Releases
// do not wait: a release lost in a failover only keeps its permits taken
// until the lease's TTL.
//
// Releases do not hand leases over to waiters that use it: such a grant
// is made by another Client's release, whose replication the waiter
// cannot confirm; they are woken and acquire themselves.
//
// Cost: each acquire attempt, Resume and lease refresh call waits for
// the replicas' acknowledgement, about one master-to-replica round trip
// (WAIT is pipelined with the script, so no client round trip is added).
// Attempts that only queue pay it too. While fewer than n replicas are
// up, each such call takes the whole timeout, and the Client's other
// refreshes wait behind it.
//
// What remains possible, since WAIT does not make Redis strongly
// consistent:
//   - With n below the number of replicas, a failover may promote one
//     that does not have the lease. The holder learns of it at its next
//     refresh; until then another may be granted the permits. Make n the
//     number of replicas, or have the protected resource check fencing
//     tokens.
//   - A write that was not confirmed stays on the master: if it fails
//     before the lease is given back, a replica that did get it may be
//     promoted, with a lease nobody holds until its TTL.
//   - A replica confirms what it received, not what it persisted: one
//     that restarts empty and is then promoted has lost it.
//   - On a Cluster, the script and WAIT go to the master of the name's
//     slot directly (WAIT must follow the script on its connection), so
//     during a resharding a call fails with MOVED instead of following
//     it, and ClusterClient hooks do not see these calls.
func WaitReplicas(n int, timeout time.Duration) NameOption {
	return nameOption(func(c *config) { c.replicas = store.ReplicaWait{N: n, Timeout: timeout} })
}

func (c *config) validate() error {
	if c.ttl <= 0 {
		return argError("TTL", c.ttl, "must be > 0")
	}
	if !(c.clockDrift >= 0 && c.clockDrift < 0.5) { // NaN too
		return argError("ClockDrift", c.clockDrift, "must be in [0, 0.5)")
	}
	if c.ttl > maxTTL {
		return argError("TTL", c.ttl, "must be at most 24h: a lease is kept alive by refreshes, and a restarted server grants nothing new for the TTL (RestartQuarantine)")
	}
	if c.ttl < MinTTL {
		return argError("TTL", c.ttl, "must be >= MinTTL ("+MinTTL.String()+"): a shorter lease is lost before its refresh's reply arrives on a loaded machine")
	}
	if !c.refreshSet {
		c.refresh = c.ttl / 3 // derived again for each TTL a semaphore sets
	}
	if c.refresh < 0 || c.refresh >= c.ttl-c.drift(c.ttl) {
		return argError("RefreshInterval", c.refresh, "must be >= 0 and below the TTL less the drift allowance ("+(c.ttl-c.drift(c.ttl)).String()+")")
	}
	if c.acquireTimeout < 0 {
		return argError("AcquireTimeout", c.acquireTimeout, "must be >= 0")
	}
	for _, r := range c.prefix {
		if r == '{' || r == '}' {
			return argError("Prefix", c.prefix, "must not contain '{' or '}'")
		}
	}
	if c.nodeTimeout < 0 || c.nodeTimeout >= c.ttl {
		return argError("NodeTimeout", c.nodeTimeout, "must be > 0 and < TTL "+c.ttl.String())
	}
	if c.maxHold < 0 {
		return argError("MaxHold", c.maxHold, "must be >= 0")
	}
	if c.quarantine < 0 || c.quarantine > maxTTL {
		return argError("RestartQuarantine", c.quarantine, "must be between 0 and 24h")
	}
	if !c.quarantineSet {
		c.quarantine = c.ttl // derived again for each TTL a semaphore sets
	}
	if !c.acquireSet {
		// Derived again for each TTL; the 2s cover a wait that starts
		// just before the quarantine does and a loaded machine.
		c.acquireTimeout = max(defaultAcquireTimeout, c.quarantine+2*time.Second)
	}
	if c.releaseTimeout <= 0 {
		return argError("ReleaseTimeout", c.releaseTimeout, "must be > 0")
	}
	if c.replicas.N < 0 {
		return argError("WaitReplicas", c.replicas.N, "must be >= 0")
	}
	if c.replicas.On() && (c.replicas.Timeout <= 0 || c.replicas.Timeout >= c.ttl) {
		return argError("WaitReplicas", c.replicas.Timeout, "timeout must be > 0 and below the TTL "+c.ttl.String())
	}
	if l := c.learn; c.learnSet && (l.Min < 1 || l.Start < l.Min) {
		return argError("Adaptive", l, "min must be at least 1 and start at least min")
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return nil
}

// nodeWait is NodeTimeout or its default.
func (c *config) nodeWait() time.Duration {
	if c.nodeTimeout > 0 {
		return c.nodeTimeout
	}
	// A third of the TTL leaves the lease most of its life after a slow
	// node's answer; a tenth made one node a few ms slow fail short TTLs.
	return min(c.ttl/3, 500*time.Millisecond)
}

// drift is how much earlier than Redis a holder considers its lease over.
func (c *config) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.clockDrift) + 2*time.Millisecond
}

// AcquireOption shapes one acquisition.
type AcquireOption func(*acquireOptions)

// acquireOptions is what AcquireOptions set.
type acquireOptions struct {
	weight  int64
	id      string
	idGiven bool           // ID's; else id is IDPrefix's prefix, or ""
	maxWait *time.Duration // MaxWait's, if given
}

// Weight asks for n permits held by one lease (default 1); 1 <= n <= limit.
func Weight(n int64) AcquireOption { return func(o *acquireOptions) { o.weight = n } }

// MaxWait bounds how long this Acquire waits, in place of the
// Semaphore's AcquireTimeout, with the same meaning and errors (0: only
// the context bounds it): a caller whose wait is part of a longer budget
// (a task's, a request's) passes what is left of it, and still hears a
// *BusyError, with Paused set while the name is paused (inspect.Inspector.Pause),
// rather than its context's end. TryAcquire ignores it. A negative d
// gives an *ArgumentError naming "MaxWait".
func MaxWait(d time.Duration) AcquireOption { return func(o *acquireOptions) { o.maxWait = &d } }

// ID sets the lease id (default: unique, made up by the Client: its random
// id and a sequence number). An id names one holder
// at a time: acquiring with an id that a live lease of another holder has
// (another process, or another Lease of this Client) waits its turn like
// any request. Only a retry after a lost reply (same Client, no live Lease
// of that id) gets the lease back, refreshed, taking no further permit.
// Asking with another weight than the lease of that id holds gives an
// *ArgumentError for "Weight".
func ID(id string) AcquireOption { return func(o *acquireOptions) { o.id, o.idGiven = id, true } }

// IDPrefix makes the lease id prefix followed by the id the Client makes
// up (unique): the id names what holds the lease (a task's run) and, as a
// made-up id, is never asked for twice, so a release may grant the lease
// to its waiter directly, with no attempt of its own (see the package
// doc), which ID's caller-given id cannot. The later of ID and IDPrefix
// applies. A prefix with a space gives an *ArgumentError naming
// "IDPrefix" (wake-up messages are split at spaces).
func IDPrefix(prefix string) AcquireOption {
	return func(o *acquireOptions) { o.id, o.idGiven = prefix, false }
}
