// Package torture is the limiter's torture suite; it has no code of its
// own, only tests.
//
// K processes (re-runs of the test binary) of G goroutines each share one
// semaphore, with random weights, TTLs and holds (one goroutine per
// process holds for up to two TTLs, the others mostly for milliseconds),
// while a fault is injected: Redis paused shorter and longer than the
// TTL, a process killed -9, Redis out of memory, Redis restarted empty,
// connections black-holed then reset, a Sentinel failover, and Redlock
// nodes stopped, paused and restarted empty.
//
// Every goroutine writes what happens to it to an observer, a second
// redis-server that the limiter never talks to: the start of each
// attempt, each grant (with its fencing token), each loss notice and each
// release. Each event takes the next number of one counter, atomically
// with its record, so the log has one order. Afterwards the parent
// replays it and checks that
//
//   - the permits of the leases granted and not yet released, told of
//     loss or killed never exceed the limit, and
//   - fencing tokens are unique, and strictly increasing in grant order:
//     a lease whose request was sent after another lease was granted has
//     the higher token.
//
// A grant is logged after Acquire returned and a release before Release
// is called, so each logged hold lies within the real one: an overlap in
// the log is a real overlap. A loss is logged as soon as Done closes,
// one round trip to the observer late; a grant that came within that
// round trip after the loss notice would be blamed on the limiter.
// Hence no scenario lets Redis expire the lease of a holder that is alive
// and reachable while others can be granted it, and no TTL is shorter
// than 2s, so that a holder's refreshes would have to stall for a second
// and more on a loaded machine.
//
// Each scenario also prints how many holders were told of loss, the
// acquire attempts per wait (counted by a go-redis hook on the acquire
// script: no busy loops), and after a kill how long the dead process's
// permits took to come back. Only the invariants are asserted, with a
// few sanity checks (the fault reached a holder, attempts per wait far
// from a busy loop); timings are printed.
//
// `go test ./internal/torture` runs every scenario small (part of `make
// test`, about 30s with -race on two cores); `make torture` runs them
// with 6 processes of 8 goroutines, each fault three times, and prints
// the table.
package torture
