package limiter

// What operators read and set: the fleet-wide limit, the names in use and
// the queue (cmd/redsem is built on these).

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// SetLimit stores in Redis a limit that every process's Semaphore of this
// name obeys in place of its own (the limit it was made with), until
// SetLimit(ctx, 0) clears it: one command to follow a third party's new
// quota, with no deploy. Lowering it evicts nobody: new grants wait until
// the permits in use fit under it. Raising it wakes the waiters that now
// fit at once. A request heavier than the stored limit fails with an
// *ArgumentError naming "Weight" instead of waiting forever. Clearing it
// wakes the queue, and from then on each waiter is granted (by its own
// acquire, or by a release's handoff) under its own Semaphore's limit;
// the clearer's own limit plays no part (an operator's tool may use any).
//
// While a limit is stored, the semaphore's keys do not expire (an idle
// night must not bring back the processes' own limits); clearing it lets
// them expire again once unused. n outside [0, 2^40] gives an
// *ArgumentError, as does a nil ctx; a Redlock Client cannot store one
// (an error says so); after Close it returns ErrClosed. A Redis failure,
// or ctx ending, is returned wrapped, and the limit may then have been
// stored all the same (the reply may be what was lost): call it again, or
// read it back with EffectiveLimit.
func (s *Semaphore) SetLimit(ctx context.Context, n int64) error {
	if ctx == nil {
		return argError("ctx", nil, "must not be nil")
	}
	if n < 0 || n > maxLimit {
		return argError("n", n, fmt.Sprintf("must be between 0 (clear) and %d", int64(maxLimit)))
	}
	if err := s.c.Err(); err != nil {
		return err
	}
	woken, err := s.c.st.setLimit(ctx, s.keys, n, s.c.channel, s.cfg.ttl)
	s.c.hub.wake(woken)
	if err != nil {
		return redisError("set limit", s.name, err)
	}
	return nil
}

// EffectiveLimit returns the limit that grants obey now: the one stored
// with SetLimit (fleet true), or else this Semaphore's own (Limit; always
// so on a Redlock Client). A nil ctx gives an *ArgumentError; a Redis
// failure, or ctx ending, is returned wrapped.
func (s *Semaphore) EffectiveLimit(ctx context.Context) (limit int64, fleet bool, err error) {
	if ctx == nil {
		return 0, false, argError("ctx", nil, "must not be nil")
	}
	n, err := s.c.st.fleetLimit(ctx, s.keys)
	if err != nil {
		return 0, false, redisError("read limit", s.name, err)
	}
	if n > 0 {
		return n, true, nil
	}
	return s.limit, false, nil
}

// Names lists, sorted, the semaphores under the Client's prefix that have
// state in Redis (held, waited on, or used within about two TTLs, or with
// a stored limit) and whose name matches the glob match ("" matches all),
// scanning every master of a Cluster and every node of a Redlock Client.
// match is a glob in Redis's syntax (that of KEYS and SCAN MATCH: '*',
// '?', '[...]' with '^' and ranges, '\' quoting the next byte), matched
// against the name itself, as passed to Client.Semaphore, not against its
// key: neither the prefix nor how the key encodes the name plays a part,
// and a malformed glob selects what Redis would select with it. It is for
// operators: it SCANs every state key under the prefix, whatever match
// is. A nil ctx gives an *ArgumentError; a Redis failure, or ctx ending,
// is returned wrapped.
func (c *Client) Names(ctx context.Context, match string) ([]string, error) {
	if ctx == nil {
		return nil, argError("ctx", nil, "must not be nil")
	}
	names, err := c.st.names(ctx, statePattern(c.cfg.prefix))
	if err != nil {
		return nil, fmt.Errorf("limiter: list names: %w", err)
	}
	names = matchingNames(names, match)
	slices.Sort(names)
	return names, nil
}

// matchingNames keeps, in place, the names that the glob match selects
// ("" selects all).
func matchingNames(names []string, match string) []string {
	if match == "" {
		return names
	}
	return slices.DeleteFunc(names, func(name string) bool { return !globMatch(match, name) })
}

// Waiter describes one request waiting in a semaphore's queue, as Redis
// sees it.
type Waiter struct {
	ID     string        // the wait id (not the lease id it asks for)
	Weight int64         // permits it asks for
	TTL    time.Duration // until its entry expires unless its Client keeps it alive
}

// maxWaitersListed bounds what Waiters reads in one call.
const maxWaitersListed = 1000

// Waiters lists the requests waiting for this semaphore, in the order
// they will be served (the first 1000; on a Redlock Client, one node's
// queue, which only says whom to wake). Read-only, for operators. A nil
// ctx gives an *ArgumentError; a Redis failure, or ctx ending, is
// returned wrapped.
func (s *Semaphore) Waiters(ctx context.Context) ([]Waiter, error) {
	if ctx == nil {
		return nil, argError("ctx", nil, "must not be nil")
	}
	ws, err := s.c.st.waiters(ctx, s.keys, maxWaitersListed)
	if err != nil {
		return nil, redisError("waiters", s.name, err)
	}
	return ws, nil
}
