package dashboard

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/namestate"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

func testSampler(t *testing.T, in *inspect.Inspector, opts ...Option) *sampler {
	t.Helper()
	cfg, err := defaultConfig().with(opts)
	if err != nil {
		t.Fatal(err)
	}
	return newSampler(in, cfg)
}

// A semaphore whose rate limit of the same name has no free slot lets
// nothing through: saturated, as a rate limit alone is.
func TestSaturatedByTheRate(t *testing.T) {
	wait := int64(30_000)
	for _, sem := range []bool{true, false} {
		v := nameView{Name: "api", Semaphore: sem, Rate: &namestate.Rate{NextFreeMs: &wait}}
		if !saturated(v) {
			t.Errorf("semaphore %v, next free in 30s: not saturated", sem)
		}
	}
}

// Names that come and go keep at most MaxNames histories, each no larger
// than its points.
func TestHistoriesBoundedByMaxNames(t *testing.T) {
	s := testSampler(t, nil, MaxNames(10))
	now := time.Now()
	for round := range 100 {
		views := make([]nameView, 10)
		for i := range views {
			views[i] = nameView{Name: fmt.Sprintf("user:%d:%d", round, i), Semaphore: true}
		}
		now = now.Add(time.Second)
		s.record(now, views, true)
	}
	if len(s.hist) > 10 {
		t.Errorf("MaxNames 10: %d histories kept", len(s.hist))
	}
	for name, h := range s.hist {
		if cap(h.points) > 16 {
			t.Errorf("%s: %d points allocated for %d", name, cap(h.points), len(h.points))
		}
		if name[:6] != "user:9" {
			t.Errorf("kept %s, not one of the names seen last", name)
		}
	}
}

// The ring keeps the last points, oldest first.
func TestHistoryRing(t *testing.T) {
	var h history
	for i := range 50 {
		h.add(point{at: int64(i)}, 20)
	}
	ps := h.ordered()
	if len(ps) != 20 || ps[0].at != 30 || ps[19].at != 49 || cap(h.points) != 20 {
		t.Errorf("got %d points from %d to %d (cap %d), want the last 20", len(ps), ps[0].at, ps[len(ps)-1].at, cap(h.points))
	}
}

// An action's sample, just after a tick, adds no point to the charts:
// the next tick counts its grant over a whole interval.
func TestActionSampleAddsNoPoint(t *testing.T) {
	s := testSampler(t, nil)
	now := time.Now()
	tok := now.UnixMicro()
	s.record(now, []nameView{{Name: "jobs", Semaphore: true}}, true)
	now = now.Add(time.Second)
	s.record(now, []nameView{{Name: "jobs", Semaphore: true}}, true)
	granted := []holderView{{Holder: namestate.Holder{ID: "a", Token: tok + 2_000_000}}}
	s.record(now.Add(5*time.Millisecond), []nameView{{Name: "jobs", Semaphore: true, Holders: granted}}, false)
	if ps := s.history("jobs"); len(ps) != 2 {
		t.Fatalf("the action's sample added a point: %d points", len(ps))
	}
	now = now.Add(time.Second)
	s.record(now, []nameView{{Name: "jobs", Semaphore: true, Holders: granted}}, true)
	ps := s.history("jobs")
	if g := ps[len(ps)-1].grants; g != 1 {
		t.Errorf("grants/s after 1 grant in a 1s interval: %v, want 1", g)
	}
}

// A name that goes and comes back has a gap in its history, not its old
// value held across the time it was gone.
func TestHistoryGap(t *testing.T) {
	s := testSampler(t, nil)
	now := time.Now()
	limit := int64(5)
	v := nameView{Name: "jobs", Semaphore: true, FleetLimit: &limit, InUse: 3}
	s.record(now, []nameView{v}, true)
	for range 3 {
		now = now.Add(time.Second)
		s.record(now, []nameView{}, true)
	}
	now = now.Add(time.Second)
	s.record(now, []nameView{v}, true)
	ps := s.history("jobs")
	if len(ps) != 3 || !math.IsNaN(float64(ps[1].inUse)) || !math.IsNaN(float64(ps[1].limit)) || ps[2].inUse != 3 {
		t.Errorf("want a point, one gap, a point; got %+v", ps)
	}
}

// A sample older than 3 intervals is stale: it says so, as a failure.
func TestStaleSample(t *testing.T) {
	s := testSampler(t, nil)
	at := time.Now()
	s.latest.Store(&snapshot{At: at, Names: []nameView{}})
	if snap := s.fresh(at.Add(2 * time.Second)); snap.Err != "" {
		t.Errorf("2 intervals: %q", snap.Err)
	}
	if snap := s.fresh(at.Add(4 * time.Second)); snap.Err == "" {
		t.Error("4 intervals without a sample: not stale")
	}
}

// Between listings a sample reads the known names and SCANs nothing; a
// name that a page asks for before the next listing is read at the next
// sample.
func TestSampleScansOnlyToList(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redistest.Limiter(t, srv.Client(t), limiter.Prefix("cost:"))
	ctx := context.Background()
	in := inspect.New(c)
	for i := range 20 {
		if err := in.SetLimit(ctx, fmt.Sprintf("tenant:%02d", i), 5); err != nil {
			t.Fatal(err)
		}
	}
	s := testSampler(t, in)
	s.sample(ctx, true)
	srv.ResetStats(t)
	for range 5 {
		s.sample(ctx, true)
	}
	calls := srv.CommandCalls(t)
	if calls["scan"] != 0 || len(s.latest.Load().Names) != 20 {
		t.Errorf("5 samples between listings: %d SCANs, %d names", calls["scan"], len(s.latest.Load().Names))
	}
	if err := in.SetLimit(ctx, "new", 3); err != nil {
		t.Fatal(err)
	}
	s.want("new")
	s.want("nothing-here")
	s.sample(ctx, false)
	snap := s.latest.Load()
	if v := view(snap, "new"); v == nil || v.FleetLimit == nil || *v.FleetLimit != 3 || len(snap.Names) != 21 {
		t.Errorf("a name asked for: %+v among %d", v, len(snap.Names))
	}
	if len(s.history("new")) != 0 {
		t.Error("an action's sample added a point")
	}
}

// The names are listed again every interval while a listing is cheap,
// and no sooner than listShare times what the last one took when it is
// not (a large keyspace), nor later than 30s.
func TestListAgainScalesWithTheListingsCost(t *testing.T) {
	s := &sampler{cfg: config{interval: time.Second}}
	if !s.listAgain() {
		t.Fatal("never listed: want a listing")
	}
	for _, c := range []struct {
		took, since time.Duration
		want        bool
	}{
		{time.Millisecond, 900 * time.Millisecond, false},
		{time.Millisecond, 1100 * time.Millisecond, true}, // cheap: every interval
		{200 * time.Millisecond, 3 * time.Second, false},  // 230ms for 300k keys
		{200 * time.Millisecond, 4100 * time.Millisecond, true},
		{10 * time.Second, 29 * time.Second, false},
		{10 * time.Second, 31 * time.Second, true}, // at most 30s apart
	} {
		s.names = listing{at: time.Now().Add(-c.since), took: c.took}
		if got := s.listAgain(); got != c.want {
			t.Errorf("a listing that took %v, %v ago: listAgain %v, want %v", c.took, c.since, got, c.want)
		}
	}
}
