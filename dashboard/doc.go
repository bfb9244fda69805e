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
// 1s) with the Inspector, and lists the names again with two SCANs,
// which walk every key of the database, as often as that stays cheap.
// Everything served reads the latest sample: viewers, glob filters and
// scrapes add no load on Redis. When no good sample came for 3 intervals
// the pages and /metrics say the sample failed. Give the go-redis client
// ContextTimeoutEnabled (or a ReadTimeout) so a read of a hung Redis ends.
//
// The history is kept in this process's memory, about 28 KB per name at
// 15 minutes of 1s samples, for at most MaxNames names: a restart starts
// the charts afresh. What Redis does not store is derived and labelled
// so: a holder's age (from its fencing token: off by the clocks' skew), a
// waiter's age (since the sampler first saw it: "≥" for older ones),
// grants per second (a lower bound) and a process's own limit (not in
// Redis: "-").
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
// no network. The charts are uPlot 1.6.32 (MIT, static/uPlot.LICENSE).
//
// docs/design.md (dashboard) has the costs, the timings and how the
// derived values are computed; docs/cli.md shows redsem serve.
package dashboard
