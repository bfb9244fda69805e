// Package limiter provides distributed semaphores and mutexes on Redis.
//
// A Semaphore named N with limit L lets at most L permits be held at once
// by every process that uses the same Redis and name; a Mutex is a
// Semaphore of one permit. Each acquisition is a Lease: an id, a weight
// (permits), a fencing token and an expiry on the Redis server's clock.
//
// # Guarantees
//
//   - Never more than the limit: acquire is one Lua script that drops
//     expired leases and grants only if the permits fit.
//   - Each lease has its own expiry (a sorted-set score, not a key TTL), so
//     holders with different TTLs never evict each other, and a crashed
//     holder's permits come back after its TTL.
//   - Fencing tokens are strictly increasing per name, also after every
//     key of the name expired: a token is never below the server's time in
//     microseconds. No key lives forever.
//   - Acquiring with the same ID is idempotent: a retried task keeps its
//     one permit.
//   - A holder learns of loss before anyone else can be granted its
//     permits: its local deadline ends before Redis' expiry, even while
//     Redis is unreachable.
//
// # Cost
//
// An uncontended Acquire or TryAcquire is one round trip, Release one more.
// Waiting sends no commands while nothing changes: releases publish on the
// semaphore's channel (sharded pub/sub on Cluster), each process keeps one
// subscription per name for all its waiters and wakes only as many as
// permits were freed; a timer set to the earliest lease expiry covers
// expiries and lost messages. Held leases are refreshed by one goroutine
// per client, in one pipeline per round.
//
// # Deployments
//
// Any redis.UniversalClient: a single node, a Sentinel failover client, or
// a Cluster client (all keys of a name share one hash tag, even when the
// name contains braces). Redis failover can lose recently written leases;
// where that matters, use a quorum of independent nodes.
//
// go-redis applies a context's deadline to the socket only with
// ContextTimeoutEnabled; without it a call to an unresponsive Redis waits
// for ReadTimeout. Background refreshes and quorum calls are bounded here
// regardless, and a lease's loss is reported from its local deadline.
package limiter
