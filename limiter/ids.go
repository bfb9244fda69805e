package limiter

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"
)

// leaseKey names a lease id of one semaphore.
type leaseKey struct{ keys, id string }

// ids is what a Client knows of its lease ids, under one lock: the live
// Lease of each (one holder per id; Close releases them), and, for the
// ids a caller gave, what a retry after a lost reply may take back.
type ids struct {
	mu     sync.Mutex
	closed bool // Close collected the live leases: no more are tracked
	live   map[leaseKey]*Lease
	given  map[leaseKey]*givenID
	// prune: prune the given ids when the map reaches it.
	prune int
}

// givenID is what a Client knows of a caller-given lease id, so that a
// retry after a lost reply can take back the lease that reply was about,
// and nothing else.
type givenID struct {
	// asking counts the attempts, Resumes and releases of the id in flight.
	asking int
	// reclaim is closed when the one attempt allowed to take a lease of
	// the id back finishes; other attempts of the id wait for it (nil:
	// none is out).
	reclaim chan struct{}
	// unsure: an attempt got no reply, so until then Redis may hold a
	// lease of the id for this Client that no Lease stands for.
	unsure time.Time
	// handed is the highest token of the id that this Client made a Lease
	// of (or gave back after a late reply); until handedUntil a lease with
	// it may still be in Redis, released or lost here, and a reclaim must
	// never return it: its holder may still be writing, or its release
	// may still be on the way.
	handed      int64
	handedUntil time.Time
}

// givenPruneMin is the size at which the given ids are first pruned.
const givenPruneMin = 64

func newIDs() *ids {
	return &ids{live: map[leaseKey]*Lease{}, given: map[leaseKey]*givenID{}, prune: givenPruneMin}
}

func keyOf(l *Lease) leaseKey { return leaseKey{l.sem.keys.ID(), l.id} }

// track records a new lease as live, or reports false once Close began:
// Close has collected the leases it releases, so the caller gives this
// one back itself.
func (t *ids) track(l *Lease) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.live[keyOf(l)] = l
	return true
}

// untrack notes that l ended: a given id's lease may live in Redis for up
// to a TTL more (lost, or its release on the way), and no reclaim may
// return it meanwhile.
func (t *ids) untrack(l *Lease, hold time.Duration) {
	k := keyOf(l)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.live[k] == l {
		delete(t.live, k)
	}
	if g := t.given[k]; l.given && g != nil && g.handed == l.Token() {
		g.handedUntil = maxTime(g.handedUntil, time.Now().Add(hold))
	}
}

// close marks the table closed and returns the live leases, for Close to
// release.
func (t *ids) close() (held []*Lease, first bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, false
	}
	t.closed = true
	return slices.Collect(maps.Values(t.live)), true
}

// ask registers an attempt with a given id (an acquire, or a Resume, which
// never reclaims: mayReclaim false) and says whether it may take back a
// lease of that id that Redis says is this Client's: only after an
// attempt got no reply (the lease it may have made has no Lease), when no
// live Lease has the id and nothing else of the id is in flight, and then
// only a lease with a token above reclaimAbove. reclaimAbove is "" when it
// may not reclaim. While such an attempt is out, other attempts of the id
// wait: one of them could otherwise create (or take over) the lease that
// the reclaim then hands out a second time. done(err, token) unregisters
// the attempt with its outcome: a Redis error leaves the id unsure for
// hold (a TTL and its drift); token is the one Redis granted ("" for
// none).
func (t *ids) ask(ctx context.Context, k leaseKey, mayReclaim bool, hold time.Duration) (reclaimAbove string, done func(err error, token string), err error) {
	t.mu.Lock()
	g := t.givenLocked(k, time.Now())
	for g.reclaim != nil {
		ch := g.reclaim
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return "", nil, context.Cause(ctx)
		}
		t.mu.Lock()
		g = t.givenLocked(k, time.Now())
	}
	now := time.Now()
	reclaim := mayReclaim && now.Before(g.unsure) && t.live[k] == nil && g.asking == 0
	if reclaim {
		g.reclaim = make(chan struct{})
		reclaimAbove = "0"
		if now.Before(g.handedUntil) {
			reclaimAbove = strconv.FormatInt(g.handed, 10)
		}
	}
	g.asking++
	t.mu.Unlock()
	return reclaimAbove, func(err error, token string) { t.answered(k, g, reclaim, hold, err, token) }, nil
}

// answered records the outcome of an attempt of ask.
func (t *ids) answered(k leaseKey, g *givenID, reclaimed bool, hold time.Duration, err error, token string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g.asking--
	now := time.Now()
	switch {
	case err != nil:
		g.unsure = maxTime(g.unsure, now.Add(hold))
	case reclaimed:
		g.unsure = time.Time{}
	}
	if tok, perr := strconv.ParseInt(token, 10, 64); perr == nil && tok >= g.handed {
		g.handed = tok
		g.handedUntil = maxTime(g.handedUntil, now.Add(hold))
	}
	if reclaimed {
		close(g.reclaim)
		g.reclaim = nil
	}
}

// releasing keeps attempts of the lease's id from reclaiming it while its
// release is on the way: until Redis removed it, it is not theirs.
func (t *ids) releasing(l *Lease) (done func()) {
	k := keyOf(l)
	t.mu.Lock()
	g := t.givenLocked(k, time.Now())
	g.asking++
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		g.asking--
	}
}

// givenLocked returns the record of k, made if need be; whenever the map
// has doubled, records that tell nothing any more are dropped, so ids
// used once cost nothing for long.
func (t *ids) givenLocked(k leaseKey, now time.Time) *givenID {
	if g := t.given[k]; g != nil {
		return g
	}
	if len(t.given) >= t.prune {
		maps.DeleteFunc(t.given, func(k leaseKey, g *givenID) bool {
			return g.asking == 0 && !now.Before(g.unsure) && !now.Before(g.handedUntil) && t.live[k] == nil
		})
		t.prune = max(givenPruneMin, 2*len(t.given))
	}
	g := &givenID{}
	t.given[k] = g
	return g
}
