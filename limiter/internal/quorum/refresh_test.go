package quorum

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// A refresh keeps a lease while a quorum of nodes kept it, and grants it
// again where it was lost (regain); reports it lost once too many nodes
// lack it, giving it back on the few that still hold it; and fails,
// holding nothing, when the nodes that failed leave it undecided.
func TestRefreshDecidesFromQuorum(t *testing.T) {
	const tok = "42"
	for _, tc := range []struct {
		name string
		// per node: 'h' holds the lease, '-' lacks it, 'x' fails
		nodes string
		held  []bool
		fails bool
		after string // what the nodes hold after the background work
	}{
		{"all hold", "hhh", []bool{true}, false, "hhh"},
		{"majority holds: regained", "hh-", []bool{true}, false, "hhh"},
		{"majority holds, one fails", "hxh", []bool{true}, false, "h-h"},
		{"majority lacks: lost and given back", "h--", []bool{false}, false, "---"},
		{"undecided", "h-x", nil, true, "h--"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newFakeQuorum(t, time.Second, "a:1", "b:1", "c:1")
			for i, n := range q.nodes {
				switch tc.nodes[i] {
				case 'h':
					n.hold("L", tok, 1)
				case 'x':
					n.set(func(n *fakeNode) { n.fail = replyError("ERR boom") })
				}
			}
			batch := store.RefreshBatch{Keys: mutex("m"), Leases: []store.RefreshItem{{
				ID: "L", Token: tok, TTL: 10 * time.Second, Weight: 1, Owner: "me", GivenUp: func() bool { return false },
			}}}
			res := q.Refresh(context.Background(), []store.RefreshBatch{batch})
			if len(res) != 1 {
				t.Fatalf("Refresh returned %d results for 1 batch", len(res))
			}
			var qe *Error
			if got := res[0]; !slices.Equal(got.Held, tc.held) || (got.Err != nil) != tc.fails ||
				tc.fails && (!errors.As(got.Err, &qe) || qe.Op != "refresh") {
				t.Fatalf("Refresh = %+v, want held %v, failed %v (a refresh *Error)", got, tc.held, tc.fails)
			}
			for i, n := range q.nodes {
				want := ""
				if tc.after[i] == 'h' {
					want = tok
				}
				eventually(t, n.addr+" settles", func() bool { return n.held("L") == want })
			}
		})
	}
}

// A lease whose holder gave it up while its regain ran is given back on
// the nodes the regain granted it on.
func TestRegainOfGivenUpLeaseIsGivenBack(t *testing.T) {
	q := newFakeQuorum(t, time.Second, "a:1", "b:1", "c:1")
	q.nodes[0].hold("L", "42", 1)
	q.nodes[1].hold("L", "42", 1)
	batch := store.RefreshBatch{Keys: mutex("m"), Leases: []store.RefreshItem{{
		ID: "L", Token: "42", TTL: 10 * time.Second, Weight: 1, Owner: "me", GivenUp: func() bool { return true },
	}}}
	if res := q.Refresh(context.Background(), []store.RefreshBatch{batch}); !slices.Equal(res[0].Held, []bool{true}) {
		t.Fatalf("Refresh = %+v, want held", res[0])
	}
	n := q.nodes[2]
	eventually(t, "the regain reaches c:1", func() bool { return len(n.got("acquire")) == 1 })
	eventually(t, "c:1 gives the regained lease back", func() bool {
		return slices.Contains(n.got("release"), fakeCall{"release", "L", "42"}) && n.held("L") == ""
	})
}
