// Package limiter provides distributed semaphores and mutexes on Redis.
//
// Make one Client per Redis deployment (New) or per set of independent
// nodes (NewRedlock) and process, and Close it when done: it owns the
// keep-alive of every lease and queue entry, the pub/sub subscription that
// delivers wake-ups for every name it waits on (one connection per node,
// or per master of a Cluster), and the leases it holds. A Semaphore named N with limit L, made by
// Client.Semaphore, lets at most L permits be held at once by every process
// that uses the same Redis and name; Client.Mutex is the Semaphore of one permit.
// Each acquisition is a Lease: an id, a weight (permits), a fencing token
// and an expiry on the Redis server's clock. An Inspector (package inspect)
// reads the names, holders and queues in Redis and sets fleet-wide limits.
//
// A RateLimit (Client.RateLimit) is the other half of a third-party API's
// contract: at most Events per Per with a Burst, fleet-wide, on the
// server's clock. Each event reserves its time in Redis with one call
// (GCRA: the theoretical arrival time moves on atomically), so callers are
// served in the order they asked and sleep until their time, with no
// polling. inspect.Inspector.Pause stops a name's rate for a while (a 429 with
// Retry-After) for every process, and its SetRate changes its rate
// fleet-wide. Rates need one Redis deployment: a Redlock Client refuses
// them (ErrRatesUnsupported).
//
// # Words
//
// One word names one idea here, in the code and in the docs:
//
//   - lease: one holding of permits, by one holder, under one fencing
//     token; it lives in Redis until its TTL unless kept alive.
//   - waiter: a request queued for its turn (the queue is in Redis).
//   - keep-alive: the Client's batched refresh of its leases and of its
//     waiters' queue entries (RefreshInterval; a queue entry lives 3s).
//   - wake-up: a message a release (or a waiter leaving) publishes to the
//     Client of a waiter that now fits.
//   - direct grant: a release granting the next waiters their leases in
//     the same script, and telling each its token in the wake-up.
//   - handover: a lease taken over by another process, Lease.Ticket then
//     Semaphore.Resume, under a new fencing token.
//   - detach: a holder letting go of a lease here while it lives on in
//     Redis for a handover: Lease.StopRefresh, Lease.Park.
//   - reservation: the time a RateLimit gave an event; Cancel gives it
//     back while nothing was reserved after it.
//   - pause: a time before which a name grants nothing, in Redis, seen by
//     every process; it moves the reservations made before it past its
//     end, in order (Reservation).
//   - loss: a lease ending while its holder counted on it (ErrLeaseLost).
//   - restart quarantine: a server younger than RestartQuarantine grants
//     nothing on a name it has no state for.
//
// # Guarantees
//
//   - Never more than the limit: acquire is one Lua script that drops
//     expired leases and grants only if the permits fit.
//   - First come, first served across processes: a request that does not
//     fit, or finds others waiting, joins the semaphore's queue in Redis
//     and is granted in arrival order. A heavy request at the head is not
//     overtaken by lighter ones, so it cannot starve. A waiter that gives
//     up leaves and passes its turn on; a dead process's waiters leave the
//     queue by themselves within a few seconds.
//   - Each lease has its own expiry (a sorted-set score, not a key TTL), so
//     holders with different TTLs never evict each other, and a crashed
//     holder's permits come back after its TTL. Refresh never shortens it.
//   - Fencing tokens are strictly increasing per name, also after every
//     key of the name expired: a token is never below the server's time in
//     microseconds. Resume (a handover) issues a new one.
//   - One lease id, one holder: a second acquisition with the id of a live
//     lease waits its turn. Only the same Client retrying after a lost
//     reply gets its lease back.
//   - A holder learns of loss before anyone else can be granted its
//     permits: its local deadline ends before Redis' expiry, even while
//     Redis is unreachable.
//
// # Layout
//
// This package holds the API and the client runtime: Client (client.go,
// redlock.go), Semaphore (and Client.Mutex), the wait (wait.go), Lease (lease.go,
// do.go), the handover and detaching (handover.go, detach.go), the
// keep-alive (keepalive.go), wake-ups (wake.go), per-id state (ids.go),
// and RateLimit (rate.go; its store is internal/store.Rates, reserve.lua
// and its siblings in redisstore). The Inspector, with pauses and fleet
// limits and rates, is package inspect, which reads the Client's parts
// through internal/bridge (bridge.go). Where leases live is behind one interface,
// internal/store.Store: internal/redisstore keeps them in one Redis
// deployment and holds every command and Lua script; internal/quorum
// keeps them on N independent nodes, each a redisstore.Store.
//
// # Cost
//
// An uncontended Acquire or TryAcquire is one round trip, Release one more.
// Waiting sends nothing but the Client's keep-alive of its queue entries,
// one script call per waited-on name and second. A release grants the
// waiters that now fit their leases in the same script (a direct grant) and
// tells each its token, by publishing on its Client's channel or directly
// when it is the releaser's own: the next holder sends nothing, and
// nobody is told anything when nobody waits. A handed lease first lives
// only as long as the waiter's queue entry would have (so a waiter whose
// process died holds it no longer), and its holder's refresher extends
// it to its TTL unless it is released first: a Redis outage in its first
// two seconds ends it sooner than an acquired lease. Requests with an ID
// (not IDPrefix, whose id is the Client's own), a RefreshInterval of 0, a
// TTL under 3s or WaitReplicas, and every request on a Redlock Client,
// are woken instead and then acquire. Held leases are
// refreshed in bulk: one script call per semaphore (per 2,000 leases) for
// all the leases of a Client that fall due together.
//
// # Deployments
//
// Any redis.UniversalClient: a single node, a Sentinel failover client, or
// a Cluster client (all keys of a name share one hash tag, even when the
// name contains braces). On a Cluster of Redis 7 or later, wake-ups stay
// in the shard of their name (SPUBLISH to a channel with the name's hash
// tag, which the waiting Client subscribes with SSUBSCRIBE while it waits
// on the name, and a while after): a plain PUBLISH would reach every node.
// Where the servers refuse SSUBSCRIBE (before Redis 7, or an ACL) the
// Client falls back to one plain channel, as elsewhere. Redis failover can
// lose recently written leases (replication is asynchronous); where that
// matters, WaitReplicas has grants and refreshes confirmed by replicas
// (see there for what it leaves possible), or use a quorum of independent
// nodes (NewRedlock).
//
// The guarantees need Redis to keep the keys: with a maxmemory and an
// evicting maxmemory-policy (volatile-* evicts them too, since they carry
// a TTL) an evicted key forgets its holders and others are granted their
// permits. The Client checks the policy (INFO memory, every node) before
// its first acquisition and refuses to grant (ErrEvictingRedis), or, with
// AllowEviction, logs an error and grants. Use maxmemory-policy
// noeviction. A Redis restarted without persistence forgets every lease:
// holders learn of it at their
// next refresh, and the restart quarantine (RestartQuarantine) keeps the
// names it forgot from being granted until their leases have run out. A
// restart that brings back old state (an RDB snapshot, or AOF with
// appendfsync everysec after a crash) forgets only the latest grants,
// which the quarantine does not see: use appendfsync always, or a quorum.
//
// go-redis applies a context's deadline to the socket only with
// ContextTimeoutEnabled; without it a call to an unresponsive Redis waits
// for ReadTimeout. Background refreshes, releases and quorum calls are
// bounded here regardless, and a lease's loss is reported from its local
// deadline. Set ContextTimeoutEnabled: those calls then run on the
// caller's goroutine, bounded by the socket deadline; without it each
// runs in a goroutine the caller can stop waiting for, which costs about
// 30 µs more per release (docs/benchmarks-history.md).
package limiter
