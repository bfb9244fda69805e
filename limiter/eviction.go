package limiter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter/internal/redisstore"
	"github.com/redsem/redsem/limiter/internal/store"
)

// AllowEviction lets the Client grant on a Redis that may evict its keys:
// it logs the danger once, at Error level, and goes on. Without it (the
// default) the Client refuses every acquisition with ErrEvictingRedis
// when Redis (any node of it) has a maxmemory and a maxmemory-policy
// other than noeviction: redsem promises never more than the limit, and
// an evicted key breaks that promise silently. Only a Redis that can
// evict is refused (a default Redis has no maxmemory); the fix is
// maxmemory-policy noeviction. The check is one INFO memory
// per node, before the Client's first acquisition, and again before the
// next, of the nodes that did not answer only (10s later when one timed
// out); a node found evicting settles it, and a Redis that refuses INFO,
// e.g. by ACL, is taken as safe and logged at Debug. An acquisition whose ctx ends
// while it waits for a check in progress goes on to its attempt, which
// reports that ctx. A Client's alone.
func AllowEviction() Option { return clientOption(func(c *config) { c.allowEviction = true }) }

// evictionCheck remembers, per Client, what the maxmemory check found.
type evictionCheck struct {
	done atomic.Bool
	turn chan struct{} // one check at a time; waiters may give up
	err  error         // ErrEvictingRedis (wrapped) when refusing
	// checked: the nodes that answered and do not evict; a check after a
	// failure asks only the others (a Redlock node down costs the healthy
	// ones nothing).
	checked store.NodeSet
	// next: after a check that could not reach every node, when to try
	// again (not on every acquisition while a node is down).
	next time.Time
}

// evictionRecheck spaces the checks while a node does not answer.
const evictionRecheck = 10 * time.Second

// checkEviction runs the check once per Client and returns
// ErrEvictingRedis, wrapped, when the Client refuses to grant. A node
// found evicting settles it whatever the others answered; a server that
// refuses INFO (an ACL, say) is taken as safe; a check that could not
// reach every node is run again by an acquisition evictionRecheck later.
func (c *Client) checkEviction(ctx context.Context) error {
	e := &c.eviction
	if e.done.Load() {
		return e.err
	}
	select {
	case e.turn <- struct{}{}:
		defer func() { <-e.turn }()
	case <-ctx.Done():
		return nil // the attempt reports its own ctx
	}
	if e.done.Load() || time.Now().Before(e.next) {
		return e.err
	}
	found, err := c.st.Evicting(ctx, &e.checked)
	var refused redis.Error
	switch {
	case found != "":
		if c.cfg.allowEviction {
			// An evicted key forgets its holders: more than the limit could
			// then hold permits.
			c.cfg.logger.Error("redsem: Redis may evict semaphore keys", "found", found, "fix", "maxmemory-policy noeviction")
		} else {
			e.err = fmt.Errorf("%w: %s; set maxmemory-policy noeviction (or AllowEviction)", ErrEvictingRedis, found)
		}
	case err != nil && errors.As(err, &refused) && !isUnreachable(err):
		c.cfg.logger.Debug("redsem: Redis refuses INFO; assuming no eviction", "err", err)
	case err != nil:
		// Not every node answered. Ask again at the next acquisition,
		// unless the check had to wait out a silent node: then not before
		// evictionRecheck, so that a paused node does not slow down
		// every acquisition.
		if timedOut(err) {
			e.next = time.Now().Add(evictionRecheck)
		}
		return nil
	}
	e.done.Store(true)
	return e.err
}

func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// isUnreachable tells a node that did not answer from one that refused.
func isUnreachable(err error) bool {
	return redisstore.Unanswered(err) || errors.Is(err, context.Canceled)
}
