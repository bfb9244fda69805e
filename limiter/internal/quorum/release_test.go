package quorum

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// A release is sent to every node, whatever the others answered: it
// returns once a quorum answered, and the slow nodes get it all the same.
// It fails only when no quorum answered and none freed the lease.
func TestReleaseReachesEveryNode(t *testing.T) {
	for _, tc := range []struct {
		name string
		// per node: 'h' holds the lease, '-' lacks it, 'x' fails, 'y'
		// fails late, 's' holds it and answers late
		nodes string
		freed int64
		fails bool
	}{
		{"all hold", "hhh", 1, false},
		{"one fails", "hxh", 1, false},
		{"one slow", "hhs", 1, false},
		// Once failures rule out a quorum, Release returns: it succeeds
		// if a node freed the lease by then.
		{"two fail late, one frees", "yhy", 1, false},
		{"two fail, none frees", "x-x", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const slow = 500 * time.Millisecond
			q := newFakeQuorum(t, time.Second, "a:1", "b:1", "c:1")
			for i, n := range q.nodes {
				switch tc.nodes[i] {
				case 'h':
					n.hold("L", "42", 1)
				case 's':
					n.hold("L", "42", 1)
					n.set(func(n *fakeNode) { n.delay = slow })
				case 'x', 'y':
					n.hold("L", "42", 1)
					n.set(func(n *fakeNode) { n.fail = replyError("ERR boom") })
					if tc.nodes[i] == 'y' {
						n.set(func(n *fakeNode) { n.delay = 50 * time.Millisecond })
					}
				}
			}
			start := time.Now()
			rep, err := q.Release(context.Background(), mutex("m"), store.ReleaseRequest{ID: "L", Token: "42"})
			if took := time.Since(start); took >= slow {
				t.Errorf("Release took %v: it waited for the slow node", took)
			}
			var qe *Error
			if rep.Freed != tc.freed || (err != nil) != tc.fails || tc.fails && (!errors.As(err, &qe) || qe.Op != "release" || len(qe.Failed) != 2) {
				t.Fatalf("Release = %+v, %v; want freed %d, failed %v (a release *Error of 2 nodes)", rep, err, tc.freed, tc.fails)
			}
			for i, n := range q.nodes {
				eventually(t, n.addr+" got the release", func() bool {
					return slices.Equal(n.got("release"), []fakeCall{{"release", "L", "42"}})
				})
				if tc.nodes[i] != 'x' && tc.nodes[i] != 'y' {
					eventually(t, n.addr+" let L go", func() bool { return n.held("L") == "" })
				}
			}
		})
	}
}
