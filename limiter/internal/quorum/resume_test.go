package quorum

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// A handover needs a quorum of nodes to hold the lease under the ticket's
// token: then it is held under one token, the highest the nodes gave;
// too few holders, counting the failed nodes as holders, is "not held";
// otherwise the failures make it an error.
func TestResumeNeedsQuorum(t *testing.T) {
	for _, tc := range []struct {
		name string
		// per node: 'h' holds the lease, '-' lacks it, 'x' fails
		nodes   string
		granted bool
		fails   bool
	}{
		{"all hold", "hhh", true, false},
		{"majority holds", "h-h", true, false},
		{"minority holds", "h--", false, false},
		{"undecided", "hx-", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newFakeQuorum(t, time.Second, "a:1", "b:1", "c:1")
			toks := []string{"100", "300", "200"}
			for i, n := range q.nodes {
				switch tc.nodes[i] {
				case 'h':
					n.hold("L", "42", 1)
					n.set(func(n *fakeNode) { n.grant = toks[i] })
				case 'x':
					n.set(func(n *fakeNode) { n.fail = replyError("ERR boom") })
				}
			}
			rep, err := q.Resume(context.Background(), mutex("m"), store.ResumeRequest{ID: "L", Token: "42", Owner: "other", TTL: time.Second})
			var qe *Error
			if rep.Granted != tc.granted || (err != nil) != tc.fails || tc.fails && (!errors.As(err, &qe) || qe.Op != "resume") {
				t.Fatalf("Resume = %+v, %v; want granted %v, failed %v", rep, err, tc.granted, tc.fails)
			}
			if !tc.granted {
				return
			}
			want := "300"
			if tc.nodes[1] != 'h' {
				want = "200"
			}
			if rep.Token != want {
				t.Errorf("token %s, want the highest, %s", rep.Token, want)
			}
			for i, n := range q.nodes {
				if tc.nodes[i] == 'h' && n.held("L") != want {
					t.Errorf("%s holds %q, want %q", n.addr, n.held("L"), want)
				}
			}
		})
	}
}
