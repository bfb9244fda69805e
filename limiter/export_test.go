package limiter

import (
	"context"
	"time"

	"github.com/redsem/redsem/limiter/internal/quorum"
	"github.com/redsem/redsem/limiter/internal/store"
)

// AcquireOnce runs the acquire script once for id, queueing as wait (""
// = never), as if reclaim were decided by the Client: a test hook for
// states that only lost replies and races produce.
func AcquireOnce(ctx context.Context, s *Semaphore, id, wait string, reclaim bool) (granted bool, err error) {
	r, _, err := s.request(ctx, []AcquireOption{ID(id)})
	if err != nil {
		return false, err
	}
	r.Wait = wait
	if reclaim {
		r.ReclaimAbove = "0"
	}
	rep, err := s.c.st.Acquire(ctx, s.keys, r)
	return rep.Granted, err
}

// QueueTTL is how long a queue entry lives unless kept alive.
const QueueTTL = store.QueueTTL

// ShiftQuorumClock makes a Redlock Client propose tokens from a clock
// off by d, as a client on a machine with a wrong clock would.
func ShiftQuorumClock(c *Client, d time.Duration) {
	c.st.(*quorum.Store).ShiftClock(d)
}

// QueueForHandoff queues id on s as Acquire does for a waiter a release
// may hand its lease to (wait id = lease id), without waiting: the test
// plays a waiter whose wake-up is lost, or one that leaves.
func QueueForHandoff(ctx context.Context, s *Semaphore, id string) (granted bool, err error) {
	r, _, err := s.request(ctx, []AcquireOption{ID(id)})
	if err != nil {
		return false, err
	}
	r.Wait, r.DirectGrant = id, true
	rep, err := s.c.st.Acquire(ctx, s.keys, r)
	return rep.Granted, err
}

// Leave runs what a waiter that gives up runs.
func Leave(ctx context.Context, s *Semaphore, wait string) error {
	_, err := s.c.st.Leave(ctx, s.keys, wait, s.c.channel)
	return err
}

// ClientOf is the Client that made s.
func ClientOf(s *Semaphore) *Client { return s.c }

// SetShardWakes replaces the hub's shard subscriber (a test plays one
// whose placement fails).
func SetShardWakes(c *Client, sw store.ShardWakes) { c.hub.shards = sw }

// SetUsePeriod makes every Client of this process record its limits in
// use every d, each record lasting 3d: the tests' and their children's
// short expiry. It returns the previous period.
func SetUsePeriod(d time.Duration) time.Duration {
	return time.Duration(usePeriodNs.Swap(int64(d)))
}

// RecordUses marks every name of names used under limit and has c
// record them at once, as its refresher does every period.
func RecordUses(c *Client, names []string, limit int64) {
	for _, n := range names {
		c.uses.mark(useKey{name: n, limit: limit})
	}
	c.uses.mu.Lock()
	c.uses.lastFull = time.Time{} // a full record
	c.uses.mu.Unlock()
	c.uses.record(time.Now())
}
