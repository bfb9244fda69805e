package limiter

import (
	"context"
	"maps"
	"strconv"
	"time"
)

// givenID is what a Client knows of a caller-given lease id, so that a
// retry after a lost reply can take back the lease that reply was about,
// and nothing else.
type givenID struct {
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
// ttl; token is the one Redis granted ("" for none).
func (c *Client) ask(ctx context.Context, k keyspace, id string, mayReclaim bool, ttl time.Duration) (reclaimAbove string, done func(err error, token string), err error) {
	key := leaseKey{k.id(), id}
	c.mu.Lock()
	for c.reclaiming[key] != nil {
		ch := c.reclaiming[key]
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return "", nil, context.Cause(ctx)
		}
		c.mu.Lock()
	}
	now := time.Now()
	g := c.given[key]
	reclaim := mayReclaim && g != nil && now.Before(g.unsure) && c.leases[key] == nil && c.asking[key] == 0
	var ch chan struct{}
	if reclaim {
		ch = make(chan struct{})
		c.reclaiming[key] = ch
		reclaimAbove = "0"
		if now.Before(g.handedUntil) {
			reclaimAbove = strconv.FormatInt(g.handed, 10)
		}
	}
	c.asking[key]++
	c.mu.Unlock()
	return reclaimAbove, func(err error, token string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.unaskLocked(key)
		now := time.Now()
		g := c.given[key]
		switch {
		case err != nil:
			g = c.givenLocked(key, now)
			g.unsure = maxTime(g.unsure, now.Add(ttl+c.cfg.drift(ttl)))
		case reclaim && g != nil:
			g.unsure = time.Time{}
		}
		if t, perr := strconv.ParseInt(token, 10, 64); perr == nil {
			g = c.givenLocked(key, now)
			if t >= g.handed {
				g.handed = t
				g.handedUntil = maxTime(g.handedUntil, now.Add(ttl+c.cfg.drift(ttl)))
			}
		}
		if ch != nil {
			delete(c.reclaiming, key)
			close(ch)
		}
	}, nil
}

// givenLocked returns the record of key, made if need be; whenever the
// map has doubled, records that tell nothing any more are dropped, so ids
// used once cost nothing for long.
func (c *Client) givenLocked(key leaseKey, now time.Time) *givenID {
	if g := c.given[key]; g != nil {
		return g
	}
	if len(c.given) >= c.givenPrune {
		maps.DeleteFunc(c.given, func(k leaseKey, g *givenID) bool {
			return !now.Before(g.unsure) && !now.Before(g.handedUntil) && c.leases[k] == nil && c.asking[k] == 0
		})
		c.givenPrune = max(givenPruneMin, 2*len(c.given))
	}
	g := &givenID{}
	c.given[key] = g
	return g
}

// endedLocked notes that the Lease l of key ended: its lease may live in
// Redis for up to a TTL more (lost, or its release on the way), and no
// reclaim may return it meanwhile.
func (c *Client) endedLocked(key leaseKey, l *Lease) {
	if g := c.given[key]; g != nil && g.handed == l.Token() {
		g.handedUntil = maxTime(g.handedUntil, time.Now().Add(l.ttl+c.cfg.drift(l.ttl)))
	}
}

// releasing keeps attempts of the lease's id from reclaiming it while its
// release is on the way: until Redis removed it, it is not theirs.
func (c *Client) releasing(l *Lease) (done func()) {
	key := leaseKey{l.sem.keys.id(), l.id}
	c.mu.Lock()
	c.asking[key]++
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.unaskLocked(key)
	}
}

func (c *Client) unaskLocked(key leaseKey) {
	if c.asking[key]--; c.asking[key] == 0 {
		delete(c.asking, key)
	}
}
