package quorum

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ErrFleetLimit: a quorum's size is made for the asking Semaphore's
// limit, and a stored limit above it would break that arithmetic, so
// Redlock Semaphores keep their own limits.
var ErrFleetLimit = errors.New("limiter: a fleet-wide limit is not supported on a Redlock Client")

var errNoReplicas = errors.New("is not for a Redlock Client: its nodes have no replicas to wait for, and the quorum is what survives losing one")

// Error reports an operation that did not reach a quorum of nodes.
// limiter.QuorumError is this type, as limiter's API shows it.
type Error struct {
	Op     string
	Quorum int
	Nodes  int
	OK     int              // nodes that granted or answered
	Busy   []string         // nodes that were full
	Failed map[string]error // nodes that failed, by address
}

func (q *Store) error(quorum int, op string, ok int, busy []int, errs []error) *Error {
	e := &Error{Op: op, Quorum: quorum, Nodes: len(q.nodes), OK: ok}
	for _, i := range busy {
		e.Busy = append(e.Busy, q.nodes[i].Addr())
	}
	for i, err := range errs {
		if err != nil {
			if e.Failed == nil {
				e.Failed = map[string]error{}
			}
			e.Failed[q.nodes[i].Addr()] = err
		}
	}
	return e
}

// Error names the nodes that were full and those that failed, with why.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "limiter: %s reached %d of %d nodes, quorum %d", e.Op, e.OK, e.Nodes, e.Quorum)
	if len(e.Busy) > 0 {
		fmt.Fprintf(&b, "; full: %s", strings.Join(e.Busy, ", "))
	}
	for _, addr := range slices.Sorted(maps.Keys(e.Failed)) {
		fmt.Fprintf(&b, "; %s failed: %v", addr, e.Failed[addr])
	}
	return b.String()
}

// Unwrap returns the failed nodes' errors, by address.
func (e *Error) Unwrap() []error {
	var errs []error
	for _, addr := range slices.Sorted(maps.Keys(e.Failed)) {
		errs = append(errs, e.Failed[addr])
	}
	return errs
}
