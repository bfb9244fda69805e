package limiter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrEvictingRedis is returned, with FailOnEviction, by acquisitions on a
// Redis whose maxmemory policy may evict the semaphores' keys: an evicted
// key forgets its holders, and others are then granted their permits.
var ErrEvictingRedis = errors.New("limiter: Redis may evict the semaphore keys (maxmemory with an evicting maxmemory-policy)")

// FailOnEviction makes the Client refuse every acquisition with
// ErrEvictingRedis when Redis (any node of it) has a maxmemory and a
// maxmemory-policy other than noeviction. Without it the Client logs the
// danger once, at Error level, and goes on. The check is one INFO memory
// per node, before the Client's first acquisition, and again before the
// next, of the nodes that did not answer only (10s later when one timed
// out); a node found evicting settles it, and a Redis that refuses INFO,
// e.g. by ACL, is taken as safe and logged at Debug. An acquisition whose ctx ends
// while it waits for a check in progress goes on to its attempt, which
// reports that ctx. A Client option: on a Semaphore it has no effect.
func FailOnEviction() Option { return func(c *config) { c.failOnEviction = true } }

// evictionCheck remembers, per Client, what the maxmemory check found.
type evictionCheck struct {
	done atomic.Bool
	turn chan struct{} // one check at a time; waiters may give up
	err  error         // ErrEvictingRedis (wrapped) when refusing
	// checked: the nodes that answered and do not evict; a check after a
	// failure asks only the others (a Redlock node down costs the healthy
	// ones nothing).
	checked nodeSet
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
	found, err := c.st.evicting(ctx, &e.checked)
	var refused redis.Error
	switch {
	case found != "":
		if c.cfg.failOnEviction {
			e.err = fmt.Errorf("%w: %s", ErrEvictingRedis, found)
		} else {
			c.cfg.logger.Error("redsem: Redis may evict the semaphore keys, and with them the holders: more than the limit could then hold permits; set maxmemory-policy noeviction (or use FailOnEviction)", "found", found)
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
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, redis.ErrClosed)
}

// nodeSet is a set of node addresses, safe for the concurrent calls of a
// quorum.
type nodeSet struct {
	mu sync.Mutex
	m  map[string]bool
}

func (s *nodeSet) has(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[node]
}

func (s *nodeSet) add(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]bool{}
	}
	s.m[node] = true
}

// evicting returns a description of the nodes that may evict keys ("" for
// none), asking only the nodes not in checked, and adds to checked those
// that answered without.
func (s *redisStore) evicting(ctx context.Context, checked *nodeSet) (string, error) {
	var mu sync.Mutex
	var found []string
	err := s.eachMaster(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		node := nodeAddr(c)
		if checked.has(node) {
			return nil
		}
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		if what := evictionIn(info); what != "" {
			mu.Lock()
			found = append(found, what)
			mu.Unlock()
		} else {
			checked.add(node)
		}
		return nil
	})
	return strings.Join(found, "; "), err
}

// evictionIn reads INFO memory: keys can be evicted only with a maxmemory
// set and a policy other than noeviction.
func evictionIn(info string) string {
	var maxmemory int64
	policy := ""
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "maxmemory":
			maxmemory, _ = strconv.ParseInt(v, 10, 64)
		case "maxmemory_policy":
			policy = v
		}
	}
	if maxmemory == 0 || policy == "" || policy == "noeviction" {
		return ""
	}
	return fmt.Sprintf("maxmemory %d, maxmemory-policy %s", maxmemory, policy)
}

// evicting checks every node at once, each bounded by NodeTimeout like
// any quorum call: a paused node must not hold up the first acquisition.
func (q *quorumStore) evicting(ctx context.Context, checked *nodeSet) (string, error) {
	var found []string
	var errs []error
	gather(ctx, q, nil, func(ctx context.Context, _ int, n *redisStore) (string, error) {
		return n.evicting(ctx, checked)
	}, func(a nodeAnswer[string]) bool {
		errs = append(errs, a.err)
		if a.v != "" {
			found = append(found, a.v)
		}
		return false
	}, nil)
	return strings.Join(found, "; "), errors.Join(errs...)
}
