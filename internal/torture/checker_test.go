package torture

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// verdict is what the replay of a log found.
type verdict struct {
	acquisitions int
	// violations counts the grants that took the permits held (granted,
	// and not yet released, told of loss or killed) above the limit;
	// worst is the most they were above it.
	violations int
	worst      int64
	peak       int64 // most permits held at once
	lost       int   // holders told of loss
	killed     int   // leases whose holder was killed
	// backward counts grants whose token is not above that of a lease
	// granted before their request was sent; duplicate, tokens issued
	// twice.
	backward, duplicate int
	// malformed counts records the replay cannot place: an end of a lease
	// never granted, a lease granted twice, a lease never ended by a live
	// process. Any is a bug of the harness, not of the limiter.
	malformed int
	problems  []string // the first few, for the failure message
	// grants and losses per worker, to compare with what each counted.
	grantsBy, lostBy map[int]int
}

const maxProblems = 8

func (v *verdict) problem(format string, args ...any) {
	if len(v.problems) < maxProblems {
		v.problems = append(v.problems, fmt.Sprintf(format, args...))
	}
}

// ok reports whether the log shows nothing wrong.
func (v verdict) ok() bool {
	return v.violations == 0 && v.backward == 0 && v.duplicate == 0 && v.malformed == 0
}

func (v verdict) String() string {
	return fmt.Sprintf("%d acquisitions, %d over the limit (worst +%d, peak %d), %d tokens backward, %d duplicate, %d malformed records\n%s",
		v.acquisitions, v.violations, v.worst, v.peak, v.backward, v.duplicate, v.malformed, strings.Join(v.problems, "\n"))
}

// check replays a log in the observer's order against limit.
func check(recs []record, limit int64) verdict {
	recs = slices.Clone(recs)
	slices.SortFunc(recs, func(a, b record) int { return cmp.Compare(a.seq, b.seq) })
	v := verdict{grantsBy: map[int]int{}, lostBy: map[int]int{}}
	held := map[string]record{} // by lease id
	var inUse int64
	deadSince := map[int]int64{} // proc -> seq of its kill
	var grants []record
	for _, r := range recs {
		if _, dead := deadSince[r.proc]; dead {
			// A write the dead process sent before it died, which the
			// observer read after the kill: it holds nothing any more.
			continue
		}
		switch r.kind {
		case 'G':
			if _, dup := held[r.lease]; dup {
				v.malformed++
				v.problem("seq %d: lease %s granted while held", r.seq, r.lease)
				continue
			}
			v.acquisitions++
			v.grantsBy[r.proc]++
			grants = append(grants, r)
			held[r.lease] = r
			inUse += r.weight
			v.peak = max(v.peak, inUse)
			if inUse > limit {
				v.violations++
				v.worst = max(v.worst, inUse-limit)
				v.problem("seq %d: %d permits held, limit %d: %s", r.seq, inUse, limit, describe(held))
			}
		case 'R', 'L':
			g, ok := held[r.lease]
			if !ok {
				v.malformed++
				v.problem("seq %d: %c of lease %s, which is not held", r.seq, r.kind, r.lease)
				continue
			}
			if r.kind == 'L' {
				v.lost++
				v.lostBy[r.proc]++
			}
			delete(held, r.lease)
			inUse -= g.weight
		case 'K':
			deadSince[r.proc] = r.seq
			for id, g := range held {
				if g.proc == r.proc {
					v.killed++
					delete(held, id)
					inUse -= g.weight
				}
			}
		}
	}
	for _, g := range held {
		v.malformed++
		v.problem("lease %s (proc %d, granted at seq %d) never ended", g.lease, g.proc, g.seq)
	}
	checkTokens(grants, &v)
	return v
}

// checkTokens: a grant B whose request was sent after grant A was logged
// (B.attempt > A.seq) came after A in Redis too, so its token must be
// higher. grants is in log order; best[i] is the grant with the highest
// token among grants[:i+1].
func checkTokens(grants []record, v *verdict) {
	best := make([]int, len(grants))
	seen := map[int64]string{}
	for i, g := range grants {
		if i > 0 && grants[best[i-1]].token >= g.token {
			best[i] = best[i-1]
		} else {
			best[i] = i
		}
		if other, dup := seen[g.token]; dup {
			v.duplicate++
			v.problem("token %d issued to lease %s and lease %s", g.token, other, g.lease)
		}
		seen[g.token] = g.lease
	}
	for _, b := range grants {
		// Grants logged before b's attempt started.
		n := sort.Search(len(grants), func(i int) bool { return grants[i].seq > b.attempt })
		if n == 0 {
			continue
		}
		if a := grants[best[n-1]]; a.token >= b.token {
			v.backward++
			v.problem("lease %s (asked at seq %d) got token %d, not above %d of lease %s granted at seq %d",
				b.lease, b.attempt, b.token, a.token, a.lease, a.seq)
		}
	}
}

func describe(held map[string]record) string {
	ids := make([]string, 0, len(held))
	for _, g := range held {
		ids = append(ids, fmt.Sprintf("%s(w%d proc %d seq %d)", g.lease, g.weight, g.proc, g.seq))
	}
	slices.Sort(ids)
	return strings.Join(ids, " ")
}
