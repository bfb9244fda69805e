package limiter

import "context"

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
