// Package dashboard is a live web dashboard of the semaphores and rate
// limits under a limiter Client's prefix: `redsem serve`, or an
// http.Handler to mount in a service of your own (beside asynqmon, say).
//
// The overview lists every name (a glob filters it, as redsem ls reads
// one; saturated names first and marked): fleet limit, permits in use,
// holders, waiters, oldest wait, fleet rate, next free slot and pause. A
// name's page lists its holders (id, weight, fencing token, age, TTL
// left) and its wait queue in serving order, and charts the last
// History (15 minutes by default) of in use against the limit, waiters,
// grants per second and the oldest wait. Pages update in place every
// Interval. /metrics exports per-name gauges of what Redis holds
// (redsem_fleet_*), which no process's own metrics can give; the JSON
// behind the pages is under api/.
//
// # Sampling, and what a restart forgets
//
// One sampler reads the known names from Redis every Interval (default
// 1s) with the Inspector (the reads of redsem show, 16 names at a time):
// about 13 commands per semaphore, some 30-40 µs of Redis CPU each (35 ms
// a sample for 1,000 names), and one script per rate limit. Every
// interval, or every 20 times the last listing took when that is longer
// (and at least every 30s), it lists the names again with two SCANs, and there Redis walks every key of the database
// (SCAN's MATCH only filters what it returns): about 0.75 µs of CPU a
// key, 230 ms for 300,000 keys. A name new since the last listing shows up
// at the next one, or at the next sample when its page (or an action)
// asks for it. Everything served reads the latest sample: viewers, glob
// filters and scrapes add no load on Redis.
//
// A go-redis client needs ContextTimeoutEnabled (or a ReadTimeout) for a
// read of a hung Redis to end; without it the sampler leaves such a read
// behind past Timeout, and starts no other until it ends. Either way, when
// no good sample came for 3 intervals the pages and /metrics say the
// sample failed.
//
// The history is a ring per name in this process's memory, 32 bytes a
// point (about 28 KB per name at 15 minutes of 1s samples), allocated as
// points come, for at most MaxNames names (those seen last); a restart
// starts the charts afresh, and a name gone for longer than History is
// forgotten. A name that goes and comes back has a gap in its charts.
//
// What Redis does not store is derived, and labelled so:
//   - A holder's age is read from its fencing token, which the limiter
//     never makes lower than the Redis server's time in microseconds at
//     grant or handover, against this host's clock: it is off by the
//     clocks' skew.
//   - A waiter's age is since the sampler first saw it queued: for a
//     request queued before the dashboard started it is shown as "≥".
//   - Grants per second count the leases whose token is above every
//     token of the sample before (tokens only grow): a lease granted and
//     released between two samples is missed, so it is a lower bound.
//     The store keeps no grant counter; the token is a time, not one.
//   - A process's own limit (when no fleet limit is set) is not in Redis:
//     the limit shows "-".
//
// # Actions
//
// Read-only unless made with Actions(token): then a name's page also
// releases a lease, sets the fleet limit or rate, pauses and unpauses.
// Each is a POST to actions/NAME that must come from the dashboard's own
// origin (http.CrossOriginProtection: Sec-Fetch-Site, else Origin against
// Host) and carry the token in the X-Redsem-Token header or the token
// form field, never in a cookie; the page keeps the token typed in its
// header for the tab only. Put TLS in front of it when it leaves
// localhost.
//
// # Assets
//
// Everything the pages load is embedded (go:embed): the pages work with
// no network. The charts are uPlot 1.6.32 (MIT, static/uPlot.LICENSE),
// vendored minified from its npm package: about 50 KB, canvas-drawn, made
// for time series that update every second, with no dependencies.
package dashboard
