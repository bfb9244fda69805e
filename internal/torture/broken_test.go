package torture

import (
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
)

// The whole chain must be able to fail: a worker that ignores loss
// notices, on leases that end at their TTL (auto-refresh off), goes on
// "holding" a mutex that others are then granted. The check must see it.
func TestBrokenWorkerIsCaught(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	sz := size{procs: 2, goroutines: 3, run: 2500 * time.Millisecond, repeats: 1}
	r := runScenario(t, sz, spec{
		name: "broken-worker", target: single(srv), limit: 1, maxWeight: 1,
		ttls: []time.Duration{300 * time.Millisecond}, options: []string{"no-refresh"}, broken: []int{0}, unsafe: true,
		fault: func(t *testing.T, r *run) { time.Sleep(sz.run) },
	})
	if r.v.violations == 0 {
		t.Fatalf("a worker held on past its loss notices and the check saw nothing: %v", r.v)
	}
}
