package dashboard

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redsem/redsem/internal/namestate"
	"github.com/redsem/redsem/limiter"
)

// snapshot is one sample of every name: the pages and /metrics read the
// latest, never Redis, so that viewers and scrapes add no load.
type snapshot struct {
	At      time.Time  `json:"sampled_at"`
	Names   []nameView `json:"names"`   // by name
	Omitted int        `json:"omitted"` // names beyond MaxNames, not sampled
	// Err is why the last sample failed; Names and At are then the last
	// good sample's.
	Err string `json:"error,omitempty"`
}

// firstSeen is when the sampler first saw a queued request.
type firstSeen struct {
	at      time.Time
	atStart bool // at the first sample: it may have waited longer
}

// sampler reads every name under the prefix at a fixed interval and keeps
// the latest sample and each name's history.
type sampler struct {
	in  *limiter.Inspector
	cfg config

	mu        sync.Mutex                      // one sample at a time; guards what follows
	prevAt    time.Time                       // of the last good sample
	waits     map[string]map[string]firstSeen // name → wait id
	lastToken map[string]int64                // the highest token seen, by name

	histMu sync.Mutex // apart, so that pages never wait for Redis
	hist   map[string]*history

	latest    atomic.Pointer[snapshot]
	ready     chan struct{} // closed once the first sample is done
	readyOnce sync.Once
}

func newSampler(in *limiter.Inspector, cfg config) *sampler {
	s := &sampler{in: in, cfg: cfg, hist: map[string]*history{}, waits: map[string]map[string]firstSeen{},
		lastToken: map[string]int64{}, ready: make(chan struct{})}
	s.latest.Store(&snapshot{Names: []nameView{}})
	return s
}

// run samples at once and then every interval until ctx ends.
func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(s.cfg.interval)
	defer t.Stop()
	for {
		s.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// current waits for the first sample (or ctx's end) and returns the
// latest.
func (s *sampler) current(ctx context.Context) *snapshot {
	select {
	case <-s.ready:
	case <-ctx.Done():
	}
	return s.latest.Load()
}

// sample reads every name once and publishes what it read; on failure
// the last good names stay, with the error.
func (s *sampler) sample(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, max(10*s.cfg.interval, 5*time.Second))
	defer cancel()
	views, omitted, err := s.read(rctx)
	now := time.Now()
	switch {
	case ctx.Err() != nil: // Close: nothing to report
	case err != nil:
		last := *s.latest.Load()
		last.Err = err.Error()
		s.latest.Store(&last)
	default:
		s.record(now, views)
		s.latest.Store(&snapshot{At: now, Names: views, Omitted: omitted})
	}
	s.readyOnce.Do(func() { close(s.ready) })
}

// read lists the semaphores and rate limits (the first MaxNames names)
// and reads each.
func (s *sampler) read(ctx context.Context) ([]nameView, int, error) {
	sems, err := s.in.Names(ctx, "")
	if err != nil {
		return nil, 0, err
	}
	rates, err := s.in.RateNames(ctx, "")
	if err != nil {
		return nil, 0, err
	}
	isSem := make(map[string]bool, len(sems))
	for _, n := range sems {
		isSem[n] = true
	}
	names := slices.Compact(slices.Sorted(slices.Values(append(sems, rates...))))
	omitted := max(len(names)-s.cfg.maxNames, 0)
	names = names[:len(names)-omitted]
	views, err := namestate.Each(ctx, names, func(ctx context.Context, name string) (nameView, error) {
		if !isSem[name] {
			r, _, err := namestate.ReadRate(ctx, s.in, name)
			return nameView{Name: name, Holders: []holderView{}, Waiters: []waiterView{}, Rate: &r}, err
		}
		st, err := namestate.Read(ctx, s.in, name)
		return semView(st), err
	})
	return views, omitted, err
}

func semView(st namestate.State) nameView {
	v := nameView{Name: st.Name, Semaphore: true, FleetLimit: st.FleetLimit, InUse: st.InUse, Rate: st.Rate,
		Holders: make([]holderView, len(st.Holders)), Waiters: make([]waiterView, len(st.Waiters))}
	for i, h := range st.Holders {
		v.Holders[i] = holderView{Holder: h}
	}
	for i, w := range st.Waiters {
		v.Waiters[i] = waiterView{Waiter: w}
	}
	return v
}

// record completes views with what takes more than one sample (ages,
// grants, saturation) and adds them to the histories.
func (s *sampler) record(now time.Time, views []nameView) {
	elapsed := now.Sub(s.prevAt).Seconds()
	first := s.prevAt.IsZero()
	waits := make(map[string]map[string]firstSeen, len(views))
	tokens := make(map[string]int64, len(views))
	points := make([]point, len(views))
	for i := range views {
		v := &views[i]
		grants := s.countGrants(v, tokens, now)
		waits[v.Name] = s.ageWaiters(v, now, first)
		v.Saturated = saturated(*v)
		p := point{at: now.UnixMilli(), inUse: float32(v.InUse), limit: float32(math.NaN()), waiters: float32(len(v.Waiters)),
			grants: float32(math.NaN()), oldestWait: float32(v.OldestWaitMs) / 1000}
		if v.FleetLimit != nil {
			p.limit = float32(*v.FleetLimit)
		}
		if !first {
			p.grants = float32(float64(grants) / elapsed)
		}
		points[i] = p
	}
	s.waits, s.lastToken, s.prevAt = waits, tokens, now
	s.addPoints(now, views, points)
}

// addPoints adds each view's point to its history, and forgets the
// histories of names gone for longer than the charts go back.
func (s *sampler) addPoints(now time.Time, views []nameView, points []point) {
	s.histMu.Lock()
	defer s.histMu.Unlock()
	for i, v := range views {
		h := s.historyOf(v.Name)
		h.add(points[i])
		h.seen = now
	}
	for name, h := range s.hist {
		if now.Sub(h.seen) > s.cfg.keep {
			delete(s.hist, name)
		}
	}
}

// countGrants sets the holders' ages and returns how many of them were
// granted since the last sample: those whose token is above every token
// it saw (tokens only grow). A lease granted and released between two
// samples is not seen: the count is a lower bound.
func (s *sampler) countGrants(v *nameView, tokens map[string]int64, now time.Time) int {
	last, n := s.lastToken[v.Name], 0
	high := last
	for i := range v.Holders {
		h := &v.Holders[i]
		h.AgeMs = tokenAge(h.Token, now)
		if h.Token > last {
			n++
		}
		high = max(high, h.Token)
	}
	tokens[v.Name] = high
	return n
}

// ageWaiters sets the waiters' ages from when they were first seen, and
// returns the first-seen times of those queued now.
func (s *sampler) ageWaiters(v *nameView, now time.Time, first bool) map[string]firstSeen {
	seen := s.waits[v.Name]
	out := make(map[string]firstSeen, len(v.Waiters))
	for i := range v.Waiters {
		w := &v.Waiters[i]
		f, ok := seen[w.ID]
		if !ok {
			f = firstSeen{at: now, atStart: first}
		}
		out[w.ID] = f
		w.AgeMs, w.AgeAtLeast = now.Sub(f.at).Milliseconds(), f.atStart
		v.OldestWaitMs = max(v.OldestWaitMs, w.AgeMs)
	}
	return out
}

func (s *sampler) historyOf(name string) *history {
	h, ok := s.hist[name]
	if !ok {
		h = newHistory(int(s.cfg.keep/s.cfg.interval) + 1)
		s.hist[name] = h
	}
	return h
}

// history returns name's points, oldest first (none when it has none).
func (s *sampler) history(name string) []point {
	s.histMu.Lock()
	defer s.histMu.Unlock()
	if h, ok := s.hist[name]; ok {
		return h.ordered()
	}
	return nil
}
