package quorum

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// A lease is granted when a quorum of nodes grant it, whatever the others
// answered, and the nodes that granted hold it under the lease's token.
func TestMajorityGrantHoldsLease(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes int
		other func(n *fakeNode) // what the nodes past the quorum do
	}{
		{"all grant", 3, func(*fakeNode) {}},
		{"one full", 3, func(n *fakeNode) { n.full = true }},
		{"one fails", 3, func(n *fakeNode) { n.fail = replyError("ERR boom") }},
		{"two of five full", 5, func(n *fakeNode) { n.full = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newFakeQuorum(t, time.Second, []string{"a:1", "b:1", "c:1", "d:1", "e:1"}[:tc.nodes]...)
			quorum := Size(tc.nodes, 1)
			for _, n := range q.nodes[quorum:] {
				n.set(tc.other)
			}
			rep, err := q.Acquire(context.Background(), mutex("m"), acquireReq("L"))
			if err != nil || !rep.Granted || rep.Token == "" {
				t.Fatalf("Acquire = %+v, %v; want granted", rep, err)
			}
			for _, n := range q.nodes[:quorum] {
				if got := n.held("L"); got != rep.Token {
					t.Errorf("%s holds token %q, want the lease's %q", n.addr, got, rep.Token)
				}
			}
		})
	}
}

// An attempt a minority of nodes granted holds nothing: the nodes that
// granted give the lease back, by the token they granted it under, before
// Acquire returns.
func TestMinorityGrantIsRolledBack(t *testing.T) {
	for _, tc := range []struct {
		name    string
		addrs   []string
		granted int // the first nodes grant; then one is full, the rest fail
	}{
		{"1 of 3", []string{"a:1", "b:1", "c:1"}, 1},
		{"2 of 5", []string{"a:1", "b:1", "c:1", "d:1", "e:1"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newFakeQuorum(t, time.Second, tc.addrs...)
			for i, n := range q.nodes {
				switch {
				case i == tc.granted:
					n.set(func(n *fakeNode) { n.full = true })
				case i > tc.granted:
					n.set(func(n *fakeNode) { n.fail, n.failOp = replyError("ERR boom"), "acquire" })
				default:
					n.set(func(n *fakeNode) { n.grant = "7" + strings.Repeat("0", i) })
				}
			}
			r := acquireReq("L")
			r.IDGiven = true
			rep, err := q.Acquire(context.Background(), mutex("m"), r)
			if rep.Granted {
				t.Fatalf("Acquire = %+v, %v; granted by a minority", rep, err)
			}
			for i, n := range q.nodes[:tc.granted] {
				if n.count() != 0 {
					t.Errorf("%s still holds %d lease(s) after the attempt failed", n.addr, n.count())
				}
				want := []fakeCall{{"release", "L", "7" + strings.Repeat("0", i)}}
				if got := n.got("release"); !slices.Equal(got, want) {
					t.Errorf("%s got releases %v, want %v (by its own token)", n.addr, got, want)
				}
			}
		})
	}
}

// A failed attempt of a random id (not IDGiven) also gives back what a
// node that failed may have granted, its reply lost: by any token. A
// given id may be a lease its holder already has there, so it is not
// touched; nor is a node skipped as down, which never ran the call.
func TestFailedNodeReleasedOnlyForRandomID(t *testing.T) {
	for _, tc := range []struct {
		name    string
		idGiven bool
		down    bool
		want    []fakeCall
	}{
		{"random id", false, false, []fakeCall{{"release", "L", ""}}},
		{"given id", true, false, nil},
		{"random id, node down", false, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newFakeQuorum(t, time.Second, "a:1", "b:1", "c:1")
			q.nodes[1].set(func(n *fakeNode) { n.full = true })
			failed := q.nodes[2]
			failed.set(func(n *fakeNode) { n.fail, n.failOp = replyError("ERR lost"), "acquire" })
			if tc.down {
				failed.set(func(n *fakeNode) { n.fail, n.failOp = errRefused, "" })
				q.heard(2, errRefused)
			}
			r := acquireReq("L")
			r.IDGiven = tc.idGiven
			if rep, err := q.Acquire(context.Background(), mutex("m"), r); rep.Granted || err != nil {
				t.Fatalf("Acquire = %+v, %v; want full", rep, err)
			}
			if got := failed.got("release"); !slices.Equal(got, tc.want) {
				t.Fatalf("failed node got releases %v, want %v", got, tc.want)
			}
			// Nor is a give-back kept for when the node is back.
			h := &q.health[2]
			h.mu.Lock()
			defer h.mu.Unlock()
			if len(h.undos) != 0 {
				t.Fatalf("%d give-back(s) deferred for the failed node", len(h.undos))
			}
		})
	}
}

// When too many nodes failed for a quorum to be ruled out by fullness,
// the attempt fails with an *Error naming the nodes that were full and
// carrying each failed node's error under its address, listed in address
// order whatever the order of the nodes.
func TestFailedAttemptErrorNamesFullAndFailedNodes(t *testing.T) {
	q := newFakeQuorum(t, time.Second, "e:1", "d:1", "c:1", "b:1", "a:1")
	errs := map[string]error{"e:1": replyError("ERR e"), "c:1": replyError("ERR c"), "a:1": replyError("ERR a")}
	q.nodes[1].set(func(n *fakeNode) { n.full = true }) // d:1
	for _, n := range q.nodes {
		if err := errs[n.addr]; err != nil {
			n.set(func(n *fakeNode) { n.fail = err })
		}
	}
	_, err := q.Acquire(context.Background(), mutex("m"), acquireReq("L"))
	var qe *Error
	if !errors.As(err, &qe) {
		t.Fatalf("Acquire error %v, want an *Error", err)
	}
	if qe.Op != "acquire" || qe.Quorum != 3 || qe.Nodes != 5 || qe.OK != 1 {
		t.Errorf("error %+v, want acquire, quorum 3 of 5, 1 granted", qe)
	}
	if !slices.Equal(qe.Busy, []string{"d:1"}) {
		t.Errorf("Busy = %v, want [d:1]", qe.Busy)
	}
	for addr, want := range errs {
		if got := qe.Failed[addr]; got != want {
			t.Errorf("Failed[%s] = %v, want %v", addr, got, want)
		}
	}
	if len(qe.Failed) != len(errs) {
		t.Errorf("Failed = %v, want only %d nodes", qe.Failed, len(errs))
	}
	for _, want := range errs {
		if !errors.Is(err, want) {
			t.Errorf("errors.Is(err, %v) = false", want)
		}
	}
	if got := qe.Unwrap(); !slices.Equal(got, []error{errs["a:1"], errs["c:1"], errs["e:1"]}) {
		t.Errorf("Unwrap = %v, want a, c, e in address order", got)
	}
	msg := err.Error()
	if !strings.Contains(msg, "full: d:1") {
		t.Errorf("message %q does not name the full node", msg)
	}
	a, c, e := strings.Index(msg, "a:1 failed: ERR a"), strings.Index(msg, "c:1 failed: ERR c"), strings.Index(msg, "e:1 failed: ERR e")
	if a < 0 || c < 0 || e < 0 || !(a < c && c < e) {
		t.Errorf("message %q does not list the failed nodes with their errors by address", msg)
	}
}

// A node that never answers delays an attempt by at most the node
// timeout, and, marked down, not at all the next time.
func TestHungNodeDoesNotDelayDecisionPastTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	q := newFakeQuorum(t, timeout, "a:1", "b:1", "c:1")
	q.nodes[2].set(func(n *fakeNode) { n.hang = true })
	start := time.Now()
	rep, err := q.Acquire(context.Background(), mutex("m"), acquireReq("L"))
	if took := time.Since(start); took > timeout+time.Second/2 {
		t.Errorf("Acquire took %v with a node timeout of %v", took, timeout)
	}
	if err != nil || !rep.Granted {
		t.Fatalf("Acquire = %+v, %v; want granted by the two nodes that answered", rep, err)
	}
	start = time.Now()
	rep, err = q.Acquire(context.Background(), mutex("m"), acquireReq("L2"))
	if took := time.Since(start); took > timeout/2 {
		t.Errorf("second Acquire took %v: the hung node was asked again", took)
	}
	if err != nil || rep.Granted {
		t.Fatalf("second Acquire = %+v, %v; want full (the nodes up hold L)", rep, err)
	}
	if got := len(q.nodes[2].got("acquire")); got != 1 {
		t.Errorf("hung node got %d acquires, want 1 (down since)", got)
	}
}

// An attempt that has no quorum yet returns when its ctx ends, with the
// ctx's cause, though a node has not answered within a longer node
// timeout; what the others granted is given back.
func TestAcquireReturnsWhenCtxEnds(t *testing.T) {
	q := newFakeQuorum(t, 10*time.Second, "a:1", "b:1", "c:1")
	q.nodes[1].set(func(n *fakeNode) { n.full = true })
	q.nodes[2].set(func(n *fakeNode) { n.hang = true })
	cause := errors.New("caller gave up")
	ctx, cancel := context.WithTimeoutCause(context.Background(), 50*time.Millisecond, cause)
	defer cancel()
	start := time.Now()
	rep, err := q.Acquire(ctx, mutex("m"), acquireReq("L"))
	if took := time.Since(start); took > time.Second {
		t.Errorf("Acquire took %v with a ctx of 50ms", took)
	}
	if rep.Granted || !errors.Is(err, cause) {
		t.Fatalf("Acquire = %+v, %v; want the ctx's cause", rep, err)
	}
	// Given back before Acquire returns, or, if it came after the ctx
	// ended, in the background.
	n := q.nodes[0]
	eventually(t, n.addr+" gives the attempt's grant back", func() bool { return n.count() == 0 })
}
