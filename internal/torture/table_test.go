package torture

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// row is one line of the table.
type row struct {
	scenario          string
	procs, goroutines int
	v                 verdict
	errors            map[string]int
	samples           map[string]string // an error of each kind
	calls             int64
	waits             int
	perWait, maxWait  float64
	notes             []string
	took              time.Duration
}

func newRow(name string, sz size, v verdict, results []workerResult, notes []string, took time.Duration) row {
	r := row{scenario: name, procs: sz.procs, goroutines: sz.goroutines, v: v, errors: map[string]int{}, samples: map[string]string{},
		notes: notes, took: took}
	var attempts float64
	for _, res := range results {
		for k, n := range res.Errors {
			r.errors[k] += n
		}
		for k, e := range res.Samples {
			r.samples[k] = e
		}
		r.calls += res.Calls
		r.waits += res.Waits
		attempts += res.WaitAttempts
		r.maxWait = max(r.maxWait, res.MaxAttempts)
	}
	if r.waits > 0 {
		r.perWait = attempts / float64(r.waits)
	}
	return r
}

func (r row) String() string {
	var errs []string
	for k, n := range r.errors {
		errs = append(errs, k+" "+strconv.Itoa(n))
	}
	slices.Sort(errs)
	s := fmt.Sprintf("%-22s %dx%-3d acquisitions %5d  violations %d (worst +%d)  token errors %d  told of loss %3d  killed %d  acquire scripts/wait %.2f (max %.0f, %d waits)  %v",
		r.scenario, r.procs, r.goroutines, r.v.acquisitions, r.v.violations, r.v.worst, r.v.backward+r.v.duplicate,
		r.v.lost, r.v.killed, r.perWait, r.maxWait, r.waits, r.took.Round(100*time.Millisecond))
	if len(errs) > 0 {
		s += "  errors: " + strings.Join(errs, ", ")
	}
	for _, n := range r.notes {
		s += "  " + n
	}
	return s
}

// The table of every scenario run, printed at the end of TestTorture.
var (
	tableMu sync.Mutex
	table   []row
)

func addRow(r row) {
	tableMu.Lock()
	defer tableMu.Unlock()
	table = append(table, r)
}

// tableText returns the rows in the order of scenarios, whatever order
// they ended in.
func tableText() string {
	tableMu.Lock()
	defer tableMu.Unlock()
	var b strings.Builder
	for _, s := range scenarios {
		for _, r := range table {
			if r.scenario == s.name {
				b.WriteString("\n" + r.String())
			}
		}
	}
	return b.String()
}
