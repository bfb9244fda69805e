// Command redsem lets an operator look inside the semaphores and rate
// limits of github.com/redsem/redsem/limiter and steer them: list them,
// show who holds one and who waits for it, watch it live, read or set a
// limit or a rate the whole fleet obeys, pause a name, force-release
// a stuck lease, see it all live in a browser (serve), and check that a
// Redis deployment keeps the limiter's promises (doctor).
//
//	go install github.com/redsem/redsem/cmd/redsem@latest
//
// Usage:
//
//	redsem [flags] ls [PATTERN]        semaphores and rate limits under the prefix whose names
//	                                   match PATTERN, a Redis glob (* ? [a-z] [^x] \x) on the
//	                                   name (default *)
//	redsem [flags] show NAME           a semaphore's limit, holders and wait queue, and the
//	                                   fleet rate, next free time and pause of its name
//	redsem [flags] watch NAME          show, live, until Ctrl-C
//	redsem [flags] limit NAME [N]      read the fleet-wide limit, or set it to N; N=0 clears it
//	redsem [flags] rate NAME [RATE [BURST]]
//	                                   read the fleet-wide rate, or set it; RATE=off clears it
//	redsem [flags] pause NAME DURATION NAME (its permits and rates) grants nothing for DURATION
//	redsem [flags] unpause NAME        lift NAME's pause
//	redsem [flags] release NAME ID     force-release the lease with id ID
//	redsem [flags] serve               a live dashboard in the browser, and /metrics
//	redsem [flags] doctor              check Redis against the limiter's promises
//
// Flags may come before or after the command and its arguments; "--" ends
// them, for names that start with '-'.
//
//	-json              print JSON for scripts instead of text
//	-addr HOST:PORT    Redis server (default localhost:6379)
//	-cluster A,B,...   Redis Cluster seed addresses (instead of -addr)
//	-user NAME         ACL user name
//	-password PASS     password (default $REDIS_PASSWORD; prefer the variable,
//	                   a flag shows in the process list)
//	-tls               connect with TLS (rediss:// in REDIS_URL implies it)
//	-tls-ca FILE       PEM file of CA certificates to trust (implies -tls)
//	-tls-insecure      do not verify the server's certificate (implies -tls)
//	-prefix P          key prefix of the limiter Clients (default "redsem:")
//	-timeout D         bound on the whole command; for watch, on each poll (default 10s)
//	-interval D        watch: time between polls (default 500ms); serve:
//	                   between samples (default 1s)
//	-listen HOST:PORT  serve: where to listen (default 127.0.0.1:7380)
//	-actions           serve: the pages may release, set limits and rates, pause
//	-token T           serve: the actions' token (default $REDSEM_TOKEN)
//	-redlock A,B,...   doctor: check these independent nodes (a Redlock quorum)
//	-wait-replicas N   doctor: the WaitReplicas n of your Clients (default 0)
//	-ttl D             doctor: the longest TTL of your Clients (default 10s)
//
// Without -addr or -cluster, REDIS_URL (redis://[user:pass@]host:port/db
// or rediss://…, as redis.ParseURL reads it) says where Redis is. -user
// and -password override what the URL says; REDIS_PASSWORD is used when
// neither gives a password.
//
// The LIMIT that ls, show and limit print is the fleet limit stored in
// Redis by limit NAME N (Inspector.SetLimit), which overrides every
// process's own limit. When none is set they print "-": each process then
// checks acquisitions against the limit its code passed to
// Client.Semaphore, which is not stored in Redis, so redsem cannot know
// it. IN USE is the sum of the holders' weights (permits). Holders are
// listed oldest grant first, with their fencing token and the time left
// before they expire unless refreshed. WAITERS are the requests in the
// wait queue, which show lists in the order they will be served, with
// their wait id (not necessarily the lease id they will get), the
// permits they ask for and the time before their entry expires unless
// their Client keeps it alive. The limiter lists holders and queue in
// separate reads; redsem reads the queue again after the holders, and the
// holders again if it changed, so that a request granted meanwhile does
// not show in both lists or in neither.
//
// ls lists rate limits beside semaphores, KIND "rate" or "semaphore"; a
// name used as both has a line of each. A rate's LIMIT is its fleet rate,
// stored by rate NAME RATE (Inspector.SetRate), which overrides every
// process's own; "-" when none is set. NEXT FREE is how long until an
// event of cost 1 may go by the fleet rate and the pause ("now"; "-" when
// Redis holds reservations but no fleet rate, so that it depends on each
// process's own rate). PAUSED is how long the name stays paused: the
// pause is the name's, and holds its semaphore and its rate limit alike.
// A name that only has a pause is not listed. With -json each entry has every field: kind, the semaphore's
// (fleet_limit, in_use, holders, waiters; null or 0 for a rate), and
// fleet_rate ({events, per, burst}, per as "1m0s"), next_free_ms (both
// null for a semaphore, or when not known) and paused_ms. show adds the
// rate section (-json: "rate", null when the name has no fleet rate, no
// reservations and no pause).
//
// rate NAME RATE [BURST] takes RATE as N/PERIOD, PERIOD a Go duration or a
// bare unit (100/1m, 5/s, 3600/h), and BURST, the events that may go at
// once, as a separate argument (default 1); RATE may also be written as
// rate prints it ("100/1m0s burst 20"). Events already reserved keep their
// times; later ones are paced by the new rate. rate NAME off clears it.
//
// pause NAME DURATION makes every process's rate limit of NAME give no
// event a time before DURATION (at most 24h) has passed, and then paces
// them from there, with no burst; it prints how long NAME is paused for,
// which is longer when a longer pause stands: a pause is never shortened.
// unpause NAME lifts it.
//
// watch polls every -interval. On a terminal it redraws the view of show
// in place at every poll; when its output is not a terminal it prints a
// line only when the limit, a holder or a waiter, the fleet rate, or
// whether the name is paused changed (not for TTLs and times counting
// down); a name with rate state or a pause ends it with its rate:
//
//	2025-06-01T10:15:02.120+02:00 jobs limit=- in_use=3 holders=2 [worker-1:2 worker-2:1] waiters=1 [c0ffee.1k:2]
//	2025-06-01T10:15:03.020+02:00 api limit=- in_use=0 holders=0 [] waiters=0 [] rate=100/1m0s burst=20 next_free=now paused=-
//
// With -json it prints, on a terminal or not, one JSON object per change:
// show's, with the time it was read. SIGINT (Ctrl-C) or SIGTERM ends it
// with exit status 0. A failure of the first read ends it; a later one is
// shown as a change and the polling goes on.
//
// limit NAME N never evicts holders: when the new limit is below the
// permits in use, holders keep them and new grants wait until the permits
// in use fit. limit NAME 0 wakes the waiters at once, and each is granted
// or waits on under its own process's limit.
//
// release removes the lease by its current fencing token, as Redis lists
// it, and frees its permits for the next waiter at once. The holding
// process is not told: it learns of the loss at its next refresh (by
// default within a third of its TTL), when its Lease ends with
// limiter.ErrLeaseLost. Until then it may still act as the holder; only
// resources that check fencing tokens are protected.
//
// serve runs the dashboard of package github.com/redsem/redsem/dashboard
// on -listen until SIGINT or SIGTERM (exit status 0): every name at a
// glance, a name's holders, queue and charts, and per-name fleet gauges on
// /metrics. It is read-only unless given -actions, which needs a token
// (-token, or better $REDSEM_TOKEN, kept out of the process list) that
// the pages send with each action. The pages name the Redis address,
// never a password. Its first line on standard output says where it
// listens (-listen 127.0.0.1:0 picks a free port).
//
// doctor checks every node (the server, each master of a Cluster, or each
// -redlock node) and prints, per check, what it found and what to do;
// with -json an array of {node, check, status, found, advice}, status
// "ok", "warn" or "error". The checks:
//
//   - eviction: maxmemory with any policy but noeviction (volatile-*
//     too) is an error: an evicted key forgets its holders.
//   - persistence: what a restart forgets (none: every lease, and new
//     names wait out the restart quarantine; RDB or AOF everysec: the
//     latest grants, which the quarantine does not see). Never an error.
//   - version: Redis 7+ with FCALL and FUNCTION LOAD allowed runs the
//     functions; otherwise the limiter falls back to EVALSHA (a warning).
//   - acl: the commands of the README's ACL line (plus WAIT with
//     -wait-replicas, CLUSTER SLOTS on a Cluster), checked without
//     running them: by ACL DRYRUN when the user may run it, else from a
//     script with redis.acl_check_cmd. A refused fcall or function|load
//     is a warning, any other refusal an error.
//   - cluster-slots: each master sees cluster_state ok and all 16384
//     slots served.
//   - replicas: a replica in place of a master is an error, so is a
//     master with fewer replicas than -wait-replicas; replicas without
//     -wait-replicas are a warning (a failover can lose grants).
//   - clock: each node's TIME against this host's clock, and with
//     -redlock the nodes' against one another: a warning above 100ms, an
//     error above 1s.
//   - quarantine: a server up for less than -ttl (plus INFO's rounding)
//     grants nothing on new names yet: a warning that says when that ends.
//
// An unreachable Redlock node is an error finding; the other nodes are
// still checked. -redlock nodes take -user, -password (or REDIS_PASSWORD)
// and the TLS flags, not REDIS_URL.
//
// Exit status: 0 success (doctor: no error found, warnings allowed); 1 an
// error (Redis unreachable or failing, no lease with that id; doctor: a
// check found an error); 2 a usage error (unknown command, wrong
// arguments, bad flag, rate or duration, unreadable REDIS_URL or -tls-ca). Errors go to
// standard error.
package main
