package namestate

import (
	"context"
	"testing"
	"time"

	"github.com/redsem/redsem/limiter/inspect"
)

// grantingSem is a reader (an Inspector) of a semaphore whose first
// waiter is granted right after the first read of the queue: the race
// between the limiter's separate reads of queue and holders, made
// certain. It has no fleet limit; other names it records in wrongNames.
type grantingSem struct {
	queueReads, holderReads int
	wrongNames              []string
}

func (g *grantingSem) check(name string) {
	if name != "jobs" {
		g.wrongNames = append(g.wrongNames, name)
	}
}

func (g *grantingSem) InUse(_ context.Context, name string) (inspect.InUse, error) {
	g.check(name)
	return inspect.InUse{}, nil
}

func (g *grantingSem) Waiters(_ context.Context, name string) ([]inspect.Waiter, error) {
	g.check(name)
	g.queueReads++
	if g.queueReads == 1 { // before the grant
		return []inspect.Waiter{{ID: "w", Weight: 1, TTL: time.Second}, {ID: "v", Weight: 1, TTL: time.Second}}, nil
	}
	return []inspect.Waiter{{ID: "v", Weight: 1, TTL: time.Second}}, nil
}

func (g *grantingSem) Holders(_ context.Context, name string) ([]inspect.Holder, error) {
	g.check(name)
	g.holderReads++
	return []inspect.Holder{{ID: "w", Weight: 1, Token: 7, TTL: time.Second}}, nil
}

// A waiter granted while Read reads shows as a holder only, not also
// in the queue.
func TestReadGrantBetweenReads(t *testing.T) {
	g := &grantingSem{}
	st, err := ReadWith(context.Background(), g, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 1 || st.Holders[0].ID != "w" || len(st.Waiters) != 1 || st.Waiters[0].ID != "v" {
		t.Errorf("ReadWith: holders %+v, waiters %+v; want holder w and waiter v only", st.Holders, st.Waiters)
	}
	if g.holderReads != 2 || g.queueReads != 3 {
		t.Errorf("read the holders %d times and the queue %d times, want 2 and 3", g.holderReads, g.queueReads)
	}
	if st.FleetLimit != nil || len(g.wrongNames) > 0 {
		t.Errorf("ReadWith: fleet limit %v, read names %q; want none, and only jobs read", st.FleetLimit, g.wrongNames)
	}
}
