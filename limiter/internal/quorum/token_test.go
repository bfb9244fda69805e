package quorum

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// The lease's token is that of a lease the id already held (its holder
// knows it), else the highest any node granted; differ names the granting
// nodes that hold another, to be written back.
func TestQuorumTokenIsExistingElseHighest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replies []store.AcquireReply
		token   int64
		differ  map[int]string
	}{
		{"all agree", []store.AcquireReply{{Token: "5"}, {Token: "5"}, {Token: "5"}}, 5, map[int]string{}},
		{"highest", []store.AcquireReply{{Token: "1"}, {Token: "3"}, {Token: "2"}}, 3, map[int]string{0: "1", 2: "2"}},
		{"existing over higher", []store.AcquireReply{{Token: "9"}, {Token: "4", Existed: true}, {Token: "7"}}, 4, map[int]string{0: "9", 2: "7"}},
		{"highest existing", []store.AcquireReply{{Token: "2", Existed: true}, {Token: "6", Existed: true}, {Token: "8"}}, 6, map[int]string{0: "2", 2: "8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			token, differ := quorumToken(tc.replies, []int{0, 1, 2})
			if token != tc.token || !maps.Equal(differ, tc.differ) {
				t.Fatalf("quorumToken = %d, %v; want %d, %v", token, differ, tc.token, tc.differ)
			}
		})
	}
}

// Nodes that granted under different tokens end up holding the lease
// under the highest, written back by the token each granted, and the
// Client's next proposal is above it: a later lease's token is higher.
func TestGrantTokenIsHighestAndWrittenBack(t *testing.T) {
	base := time.Now().Add(time.Hour).UnixMicro() // above any proposal from the clock
	toks := []string{strconv.FormatInt(base+1, 10), strconv.FormatInt(base+3, 10), strconv.FormatInt(base+2, 10)}
	q := newFakeQuorum(t, time.Second, "a:1", "b:1", "c:1")
	for i, n := range q.nodes {
		n.set(func(n *fakeNode) { n.grant = toks[i] })
	}
	rep, err := q.Acquire(context.Background(), mutex("m"), acquireReq("L"))
	if err != nil || !rep.Granted || rep.Token != toks[1] {
		t.Fatalf("Acquire = %+v, %v; want granted under the highest token %s", rep, err, toks[1])
	}
	for i, n := range q.nodes {
		if got := n.held("L"); got != toks[1] {
			t.Errorf("%s holds %q, want %q", n.addr, got, toks[1])
		}
		var want []fakeCall
		if i != 1 {
			want = []fakeCall{{"settoken", "L", toks[1]}}
		}
		if got := n.got("settoken"); !slices.Equal(got, want) {
			t.Errorf("%s got write-backs %v, want %v", n.addr, got, want)
		}
	}
	if p, _ := strconv.ParseInt(q.proposal(), 10, 64); p <= base+3 {
		t.Errorf("next proposal %d is not above the agreed token %d", p, base+3)
	}
}

// A write-back that fails leaves that node out of the lease, its grant
// given back by its own token: the lease holds while the nodes under its
// token are still a quorum, and is rolled back everywhere when not.
func TestFailedWriteBackDropsNode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		failOn  []int
		granted bool
	}{
		{"one fails", []int{2}, true},
		{"two fail", []int{0, 2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newFakeQuorum(t, time.Second, "a:1", "b:1", "c:1")
			toks := []string{"100", "300", "200"}
			for i, n := range q.nodes {
				n.set(func(n *fakeNode) { n.grant = toks[i] })
			}
			for _, i := range tc.failOn {
				q.nodes[i].set(func(n *fakeNode) { n.setToken = replyError("ERR no write-back") })
			}
			r := acquireReq("L")
			r.IDGiven = true
			rep, err := q.Acquire(context.Background(), mutex("m"), r)
			if err != nil || rep.Granted != tc.granted {
				t.Fatalf("Acquire = %+v, %v; want granted %v", rep, err, tc.granted)
			}
			for i, n := range q.nodes {
				want := "300"
				if !tc.granted || slices.Contains(tc.failOn, i) {
					want = ""
				}
				eventually(t, n.addr+" holds L under "+strconv.Quote(want), func() bool { return n.held("L") == want })
			}
			for _, i := range tc.failOn {
				n := q.nodes[i]
				if got, want := n.got("release"), (fakeCall{"release", "L", toks[i]}); !slices.Contains(got, want) {
					t.Errorf("%s got releases %v, want its own grant's %v", n.addr, got, want)
				}
			}
		})
	}
}
