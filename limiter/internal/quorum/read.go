package quorum

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redsem/redsem/limiter/internal/redisstore"
	"github.com/redsem/redsem/limiter/internal/store"
)

// Leave takes the waiter out of every node's queue.
func (q *Store) Leave(ctx context.Context, k store.Keyspace, wait, channel string) ([]string, error) {
	var woken []string
	var errs []error
	gather(ctx, q, nil, func(ctx context.Context, _ int, n *redisstore.Store) ([]string, error) {
		return n.Leave(ctx, k, wait, channel)
	}, func(a nodeAnswer[[]string]) bool {
		woken = union(woken, a.v)
		if a.err != nil {
			errs = append(errs, a.err)
		}
		return false
	}, nil)
	return woken, errors.Join(errs...)
}

// Holders lists the leases a quorum of nodes holds.
func (q *Store) Holders(ctx context.Context, k store.Keyspace) ([]store.Holder, error) {
	quorum := q.quorum(k)
	per := make([][]store.Holder, len(q.nodes))
	errs := make([]error, len(q.nodes))
	gather(ctx, q, nil, func(ctx context.Context, _ int, n *redisstore.Store) ([]store.Holder, error) {
		return n.Holders(ctx, k)
	}, func(a nodeAnswer[[]store.Holder]) bool {
		per[a.i], errs[a.i] = a.v, a.err
		return false
	}, nil)
	seen := map[string]int{}
	first := map[string]store.Holder{}
	answered := 0
	for i, err := range errs {
		if err != nil {
			continue
		}
		answered++
		for _, h := range per[i] {
			seen[h.ID]++
			if f, ok := first[h.ID]; !ok || h.TTL < f.TTL {
				first[h.ID] = h
			}
		}
	}
	if answered < quorum {
		return nil, q.error(quorum, "holders", answered, nil, errs)
	}
	var out []store.Holder
	for id, n := range seen {
		if n >= quorum {
			out = append(out, first[id])
		}
	}
	slices.SortFunc(out, func(a, b store.Holder) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Waiters lists the first node's queue that answers: a quorum's queues
// only say whom to wake, and need not agree on order.
func (q *Store) Waiters(ctx context.Context, k store.Keyspace, max int) ([]store.Waiter, error) {
	var errs []error
	for _, n := range q.nodes {
		ws, err := n.Waiters(ctx, k, max)
		if err == nil {
			return ws, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// Names lists the names found on any node.
func (q *Store) Names(ctx context.Context, pattern string) ([]string, error) {
	var out []string
	var errs []error
	for _, n := range q.nodes {
		got, err := n.Names(ctx, pattern)
		errs = append(errs, err)
		out = union(out, got)
	}
	if len(out) == 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// SetLimit refuses: a quorum's size is made for the asking Semaphore's
// limit, and a stored limit above it would break that arithmetic.
func (q *Store) SetLimit(context.Context, store.Keyspace, int64, string, time.Duration) ([]string, error) {
	return nil, ErrFleetLimit
}

// FleetLimit is always none.
func (q *Store) FleetLimit(context.Context, store.Keyspace) (int64, error) { return 0, nil }

// Evicting checks every node at once, each bounded by NodeTimeout like
// any quorum call: a paused node must not hold up the first acquisition.
func (q *Store) Evicting(ctx context.Context, checked *store.NodeSet) (string, error) {
	var found []string
	var errs []error
	gather(ctx, q, nil, func(ctx context.Context, _ int, n *redisstore.Store) (string, error) {
		return n.Evicting(ctx, checked)
	}, func(a nodeAnswer[string]) bool {
		errs = append(errs, a.err)
		if a.v != "" {
			found = append(found, a.v)
		}
		return false
	}, nil)
	return strings.Join(found, "; "), errors.Join(errs...)
}

// ShardWakes: none. The nodes are independent deployments, each woken by
// its own plain PUBLISH, which no cluster bus carries further.
func (q *Store) ShardWakes(context.Context, func(func()), func(string), func()) store.ShardWakes {
	return nil
}

// Listen subscribes on every node (one connection each): every node that
// held a lease wakes its waiters, and a waiter's channel of wake-ups
// collapses the repeats. The subscription counts as up while any node's
// is, and down once every node failed.
func (q *Store) Listen(ctx context.Context, channels []string, deliver func(channel, payload string), subscribed func(error)) {
	var mu sync.Mutex
	up, heard := make([]bool, len(q.nodes)), make([]bool, len(q.nodes))
	var wg sync.WaitGroup
	for i, n := range q.nodes {
		wg.Add(1)
		q.cfg.Spawn(func() {
			defer wg.Done()
			n.Listen(ctx, channels, deliver, func(err error) {
				mu.Lock()
				defer mu.Unlock()
				up[i], heard[i] = err == nil, true
				switch {
				case slices.Contains(up, true):
					subscribed(nil)
				case !slices.Contains(heard, false): // down only once every node said so
					subscribed(fmt.Errorf("limiter: no node to wait on: %s: %w", n.Addr(), err))
				}
			})
		})
	}
	wg.Wait()
}
