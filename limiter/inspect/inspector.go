// Package inspect is the operators' side of a limiter.Client: what Redis
// holds for each name (holders, waiters and why they wait, the limits and
// rates in use) and the fleet-wide controls (SetLimit, SetRate, Pause,
// Overload). The integrations call Pause and Overload on an upstream's
// 429; cmd/redsem and the dashboard are built on the rest. It is a package
// of its own so that limiter's API is the acquire path alone.
package inspect

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redsem/redsem/internal/glob"
	"github.com/redsem/redsem/limiter"

	"github.com/redsem/redsem/limiter/internal/bridge"
	"github.com/redsem/redsem/limiter/internal/store"
)

// Inspector reads what Redis holds for the names under a Client's prefix
// and sets their fleet-wide limits: the operators' view (cmd/redsem is
// built on it), as asynq's Inspector is for its queues. It never acquires
// or waits, and sends nothing until a method is called. Every method
// returns a *limiter.ArgumentError for a nil ctx or an empty name, a
// Redis failure (or ctx ending) wrapped, and limiter.ErrClosed after the
// Client's Close.
type Inspector struct {
	c bridge.Client
}

// New returns an Inspector of c's names. It sends nothing.
func New(c *limiter.Client) *Inspector { return &Inspector{c: bridge.Of(c)} }

// Holder describes one live lease, as Redis sees it.
type Holder struct {
	ID     string
	Weight int64
	Token  int64
	TTL    time.Duration // until it expires unless refreshed
}

// Waiter describes one request waiting in a semaphore's queue, as Redis
// sees it.
type Waiter struct {
	ID     string        // the wait id (not the lease id it asks for)
	Weight int64         // permits it asks for
	TTL    time.Duration // until its entry expires unless its Client keeps it alive
	// Limit is the limit of the Semaphore it waits on: the one it is
	// served under when no fleet limit (SetLimit) is stored.
	Limit int64
	// Why is why it waits and when it should be granted (zero on a
	// Redlock Client).
	Why Why
}

// maxWaitersListed bounds what Waiters reads in one call.
const maxWaitersListed = 1000

// keys checks the arguments every method takes and returns the name's
// keys. Their limit is 1: on a Redlock Client a name's holders are those
// a majority of the nodes hold, whatever the limits the processes use.
func (i *Inspector) keys(ctx context.Context, name string) (store.Keyspace, error) {
	switch {
	case ctx == nil:
		return store.Keyspace{}, bridge.ArgError("ctx", nil, "must not be nil")
	case name == "":
		return store.Keyspace{}, bridge.ArgError("name", `""`, "must not be empty")
	}
	return store.NewKeyspace(i.c.Prefix, name, 1), i.c.Closed()
}

// Names lists, sorted, the semaphores under the Client's prefix that have
// state in Redis (held, waited on, or used within about two TTLs, or with
// a stored limit) and whose name matches the glob match ("" matches all),
// scanning every master of a Cluster and every node of a Redlock Client.
// match is a glob in Redis's syntax (that of KEYS and SCAN MATCH: '*',
// '?', '[...]' with '^' and ranges, '\' quoting the next byte), matched
// against the name itself, as passed to Client.Semaphore, not against its
// key: neither the prefix nor how the key encodes the name plays a part,
// and a malformed glob selects what Redis would select with it. It SCANs
// every state key under the prefix, whatever match is.
func (i *Inspector) Names(ctx context.Context, match string) ([]string, error) {
	return i.names(ctx, store.StatePattern(i.c.Prefix), match, "names")
}

// names lists, sorted, the names of the keys SCAN finds by pattern that
// match the glob match; what says what is listed, in errors.
func (i *Inspector) names(ctx context.Context, pattern, match, what string) ([]string, error) {
	if ctx == nil {
		return nil, bridge.ArgError("ctx", nil, "must not be nil")
	}
	if err := i.c.Closed(); err != nil {
		return nil, err
	}
	names, err := i.c.Store.Names(ctx, pattern)
	if err != nil {
		return nil, fmt.Errorf("limiter: list %s: %w", what, err)
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
	return slices.DeleteFunc(names, func(name string) bool { return match != "" && !glob.Match(match, name) })
}

// Holders lists the live leases of name as Redis sees them. On a Redlock
// Client they are those a majority of the nodes hold, with a majority
// answering: for a mutex that is its quorum; above a limit of 1 it may
// list, for a moment, a lease still being granted or given back.
func (i *Inspector) Holders(ctx context.Context, name string) ([]Holder, error) {
	k, err := i.keys(ctx, name)
	if err != nil {
		return nil, err
	}
	hs, err := i.c.Store.Holders(ctx, k)
	if err != nil {
		return nil, bridge.RedisError("holders", name, err)
	}
	out := make([]Holder, len(hs))
	for j, h := range hs {
		out[j] = Holder(h)
	}
	return out, nil
}

// Waiters lists the requests waiting for name, in the order they will be
// served (the first 1000; on a Redlock Client, one node's queue, which
// only says whom to wake), each with why it waits and when it should be
// granted (see Why), read with the holders and the pause in one call.
func (i *Inspector) Waiters(ctx context.Context, name string) ([]Waiter, error) {
	k, err := i.keys(ctx, name)
	if err != nil {
		return nil, err
	}
	if _, ok := i.c.Store.(store.Whys); ok {
		return i.whyWaiters(ctx, k, name)
	}
	ws, err := i.c.Store.Waiters(ctx, k, maxWaitersListed)
	if err != nil {
		return nil, bridge.RedisError("waiters", name, err)
	}
	out := make([]Waiter, len(ws))
	for j, w := range ws {
		out[j] = Waiter{ID: w.ID, Weight: w.Weight, TTL: w.TTL, Limit: w.Limit}
	}
	return out, nil
}

// Limit returns the fleet-wide limit of name stored with SetLimit, or 0
// when none is (each Semaphore then obeys its own; always so on a
// Redlock Client).
func (i *Inspector) Limit(ctx context.Context, name string) (int64, error) {
	k, err := i.keys(ctx, name)
	if err != nil {
		return 0, err
	}
	n, err := i.c.Store.FleetLimit(ctx, k)
	if err != nil {
		return 0, bridge.RedisError("read limit", name, err)
	}
	return n, nil
}

// SetLimit stores in Redis a limit that every process's Semaphore of name
// obeys in place of its own (the limit it was made with), until
// SetLimit(ctx, name, 0) clears it: one command to follow a third party's
// new quota, with no deploy. Lowering it evicts nobody: new grants wait
// until the permits in use fit under it. Raising it wakes the waiters
// that now fit at once. A request heavier than the stored limit fails
// with an *ArgumentError naming "Weight" instead of waiting forever.
// Clearing it wakes the queue, and from then on each waiter is granted
// (by its own acquire, or by a release's direct grant) under its own
// Semaphore's limit.
//
// While a limit is stored, the name's keys do not expire (an idle night
// must not bring back the processes' own limits); clearing it lets them
// expire again once unused. n outside [0, 2^40] gives an *ArgumentError;
// a Redlock Client cannot store one (an error says so). A Redis failure,
// or ctx ending, is returned wrapped, and the limit may then have been
// stored all the same (the reply may be what was lost): call it again, or
// read it back with Limit.
func (i *Inspector) SetLimit(ctx context.Context, name string, n int64) error {
	k, err := i.keys(ctx, name)
	if err != nil {
		return err
	}
	if n < 0 || n > store.MaxLimit {
		return bridge.ArgError("n", n, fmt.Sprintf("must be between 0 (clear) and %d", int64(store.MaxLimit)))
	}
	woken, err := i.c.Store.SetLimit(ctx, k, n, i.c.Channel(k.WakeChannel(i.c.ID)), i.c.TTL)
	i.c.Wake(woken)
	if err != nil {
		return bridge.RedisError("set limit", name, err)
	}
	return nil
}
