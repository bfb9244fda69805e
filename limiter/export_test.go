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

// QueueForHandoff queues id on s as Acquire does for a waiter a release
// may hand its lease to (wait id = lease id), without waiting: the test
// plays a waiter whose wake-up is lost, or one that leaves.
func QueueForHandoff(ctx context.Context, s *Semaphore, id string) (granted bool, err error) {
	r, err := s.request(ctx, []AcquireOption{ID(id)})
	if err != nil {
		return false, err
	}
	r.wait, r.handoff = id, true
	rep, err := s.c.st.acquire(ctx, s.keys, r)
	return rep.granted, err
}

// Leave runs what a waiter that gives up runs.
func Leave(ctx context.Context, s *Semaphore, wait string) error {
	_, err := s.c.st.leave(ctx, s.keys, wait, s.c.channel)
	return err
}

// ScriptCall returns the ARGV of a go-redis command when it runs the
// named script ("acquire", "release" or "settoken") by FCALL, EVALSHA or EVAL: test hooks
// recognise calls by the script, not by how many arguments it has today.
func ScriptCall(name string, args []any) (argv []any, ok bool) {
	sc, known := map[string]luaScript{"acquire": acquireScript, "release": releaseScript, "settoken": setTokenScript}[name]
	if !known || len(args) < 3 {
		return nil, false
	}
	switch args[0] {
	case "fcall":
		ok = args[1] == sc.fn
	case "evalsha":
		ok = args[1] == sc.Hash()
	case "eval":
		ok = args[1] == commonLua+map[string]string{"acquire": acquireLua, "release": releaseLua, "settoken": setTokenLua}[name]
	}
	keys, _ := args[2].(int)
	if !ok || len(args) < 3+keys {
		return nil, false
	}
	return args[3+keys:], true
}

// OtherVersionLibrary is the function library a version whose release
// script differs from this one's would load.
func OtherVersionLibrary() string {
	var fns []libraryFunction
	for _, f := range libraryFunctions {
		sc := *f.sc
		if f.name == "release" {
			sc.body += "\n-- another version\n"
		}
		f.sc = &sc
		fns = append(fns, f)
	}
	return newLibrary(fns...)
}
