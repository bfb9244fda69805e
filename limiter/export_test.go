package limiter

import (
	"context"
	"time"
)

// AcquireOnce runs the acquire script once for id, queueing as wait (""
// = never), as if reclaim were decided by the Client: a test hook for
// states that only lost replies and races produce.
func AcquireOnce(ctx context.Context, s *Semaphore, id, wait string, reclaim bool) (granted bool, err error) {
	r, err := s.request(ctx, []AcquireOption{ID(id)})
	if err != nil {
		return false, err
	}
	r.wait = wait
	if reclaim {
		r.reclaimAbove = "0"
	}
	rep, err := s.c.st.acquire(ctx, s.keys, r)
	return rep.granted, err
}

// ShiftQuorumClock makes a Redlock Client propose tokens from a clock
// off by d, as a client on a machine with a wrong clock would.
func ShiftQuorumClock(c *Client, d time.Duration) {
	c.st.(*quorumStore).now = func() time.Time { return time.Now().Add(d) }
}
