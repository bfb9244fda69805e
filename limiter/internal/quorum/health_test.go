package quorum

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// A node a call did not reach is marked down: calls skip it, answering
// at once with a *downError that wraps why, until its probe finds it
// back; then it is asked again, and the give-backs meant for it meanwhile
// are sent.
func TestUnreachableNodeIsSkippedUntilProbeFindsItBack(t *testing.T) {
	q := newFakeQuorum(t, 100*time.Millisecond, "a:1", "b:1", "c:1")
	down := q.nodes[2]
	down.set(func(n *fakeNode) { n.fail = errRefused })
	if rep, err := q.Acquire(context.Background(), mutex("m"), acquireReq("L1")); err != nil || !rep.Granted {
		t.Fatalf("Acquire = %+v, %v; want granted by the nodes up", rep, err)
	}
	err := q.skip(2)
	var de *downError
	if !errors.As(err, &de) || de.addr != "c:1" || !errors.Is(err, errRefused) {
		t.Fatalf("skip(c:1) = %v, want a *downError of c:1 wrapping %v", err, errRefused)
	}
	if q.firstUp() != 0 {
		t.Errorf("firstUp = %d, want 0", q.firstUp())
	}
	if _, err := q.Release(context.Background(), mutex("m"), store.ReleaseRequest{ID: "L1"}); err != nil {
		t.Fatal(err)
	}
	q.releaseOn(mutex("m"), "L0", map[int]string{2: "7"}) // a give-back for c:1, deferred
	if got := down.got("release"); len(got) != 0 {
		t.Fatalf("c:1, down, got releases %v", got)
	}

	down.set(func(n *fakeNode) { n.fail = nil })
	eventually(t, "the probe finds c:1 back", func() bool { return q.skip(2) == nil })
	eventually(t, "c:1 gets the give-back deferred while down", func() bool {
		return slices.Equal(down.got("release"), []fakeCall{{"release", "L0", "7"}})
	})
	if rep, err := q.Acquire(context.Background(), mutex("m"), acquireReq("L2")); err != nil || !rep.Granted {
		t.Fatalf("Acquire = %+v, %v; want granted", rep, err)
	}
	if down.held("L2") == "" {
		t.Error("c:1, back up, was not asked")
	}
}

// A node that answered, even with an error, is up: only a call that did
// not reach its node (refused, timed out) marks it down.
func TestOnlyUnansweredCallMarksNodeDown(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		down bool
	}{
		{"error reply", replyError("ERR boom"), false},
		{"connection refused", errRefused, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newFakeQuorum(t, time.Second, "a:1", "b:1", "c:1")
			n := q.nodes[1]
			n.set(func(n *fakeNode) { n.fail = tc.err })
			_, _ = q.Acquire(context.Background(), mutex("m"), acquireReq("L1"))
			_, _ = q.Acquire(context.Background(), mutex("m"), acquireReq("L2"))
			if got := q.skip(1) != nil; got != tc.down {
				t.Errorf("marked down = %v, want %v", got, tc.down)
			}
			want := 2
			if tc.down {
				want = 1
			}
			// The second attempt, full on a:1 and c:1, need not wait for b:1.
			eventually(t, "b:1 gets the acquires sent to it", func() bool { return len(n.got("acquire")) >= want })
			if got := len(n.got("acquire")); got != want {
				t.Errorf("b:1 got %d acquires, want %d", got, want)
			}
		})
	}
}
