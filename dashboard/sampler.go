package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/namestate"
	"github.com/redsem/redsem/limiter/inspect"
)

// snapshot is one sample of every name: the pages and /metrics read the
// latest, never Redis, so that viewers and scrapes add no load.
type snapshot struct {
	At      time.Time  `json:"sampled_at"`
	Names   []nameView `json:"names"`   // by name
	Omitted int        `json:"omitted"` // names beyond MaxNames, not sampled
	// Err is why the last sample failed, or that none came for too long;
	// Names and At are then the last good sample's.
	Err string `json:"error,omitempty"`
	// omittedFrom is the first name left out (Omitted > 0): the names
	// from it on are beyond MaxNames.
	omittedFrom string
}

// beyondMax says whether name is one that MaxNames leaves out.
func (s *snapshot) beyondMax(name string) bool {
	return s.Omitted > 0 && name >= s.omittedFrom
}

// firstSeen is when the sampler first saw a queued request.
type firstSeen struct {
	at      time.Time
	atStart bool // at the first sample: it may have waited longer
}

// maxWanted bounds the names that pages ask for before a listing finds
// them (see sampler.want).
const maxWanted = 64

// staleAfter is how many intervals without a good sample make the latest
// one stale: the pages and /metrics then say the sample failed.
const staleAfter = 3

// closeWait bounds how long Close waits for a read that Redis does not
// answer.
const closeWait = time.Second

// errClosed is what the pages say once the dashboard is closed.
var errClosed = errors.New("dashboard closed: no more samples")

// sampler reads every name under the prefix at a fixed interval and keeps
// the latest sample and each name's history.
type sampler struct {
	in  *inspect.Inspector
	cfg config

	mu        sync.Mutex                      // one sample at a time; guards what follows
	prevAt    time.Time                       // of the last good tick
	waits     map[string]map[string]firstSeen // name → wait id
	lastToken map[string]int64                // the highest token seen, by name
	names     listing                         // the last listing, and the names found since
	reading   chan struct{}                   // closed when a read that outlived its sample ends

	wantMu sync.Mutex
	wanted map[string]bool // names pages asked for that the listing lacks

	histMu sync.Mutex // apart, so that pages never wait for Redis
	hist   map[string]*history

	pubMu     sync.Mutex // publishing, against Close's last word
	closed    atomic.Bool
	reads     sync.WaitGroup // the reads under way
	latest    atomic.Pointer[snapshot]
	ready     chan struct{} // closed once the first sample is done
	readyOnce sync.Once
}

// listing is the names to read at each sample: never changed in place,
// so that a read that outlives its sample may keep one.
type listing struct {
	at          time.Time       // when Redis was last SCANned (zero: never)
	took        time.Duration   // how long that listing took
	names       []string        // sorted, at most MaxNames
	sem         map[string]bool // the semaphores among names
	omitted     int
	omittedFrom string
}

func newSampler(in *inspect.Inspector, cfg config) *sampler {
	s := &sampler{in: in, cfg: cfg, hist: map[string]*history{},
		waits: map[string]map[string]firstSeen{}, lastToken: map[string]int64{}, wanted: map[string]bool{},
		ready: make(chan struct{})}
	s.latest.Store(&snapshot{Names: []nameView{}})
	return s
}

// listAgain reports whether the names are to be listed (SCANned) again:
// every interval while a listing is cheap, so that a new name shows up at
// once, but never sooner than listShare times what the last one took, so
// that a large keyspace (SCAN walks every key of the database) costs
// Redis at most about 1/listShare of its time; and at least every 30s.
func (s *sampler) listAgain() bool {
	l := s.names
	if l.at.IsZero() {
		return true
	}
	return time.Since(l.at) >= min(max(s.cfg.interval, listShare*l.took), 30*time.Second)
}

// listShare: a listing's cost, spread over the time until the next.
const listShare = 20

// run samples at once and then every interval until ctx ends.
func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(s.cfg.interval)
	defer t.Stop()
	for {
		s.sample(ctx, true)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// current waits for the first sample (or ctx's end, or staleAfter
// intervals: Redis may hang) and returns the latest, marked failed when
// it is stale.
func (s *sampler) current(ctx context.Context) *snapshot {
	t := time.NewTimer(staleAfter * s.cfg.interval)
	defer t.Stop()
	select {
	case <-s.ready:
	case <-ctx.Done():
	case <-t.C:
	}
	return s.fresh(time.Now())
}

// fresh is the latest sample, with an error when no good sample came for
// staleAfter intervals (Redis hangs, or answers too slowly).
func (s *sampler) fresh(now time.Time) *snapshot {
	snap := s.latest.Load()
	if snap.Err != "" || snap.At.IsZero() || s.closed.Load() {
		return snap
	}
	if age := now.Sub(snap.At); age > staleAfter*s.cfg.interval {
		stale := *snap
		stale.Err = fmt.Sprintf("no sample for %v: Redis does not answer in time", age.Round(time.Millisecond))
		return &stale
	}
	return snap
}

// want asks the next samples to read name too, which the pages ask for
// but the last listing lacks (a name new since): it joins the names read
// if Redis holds state for it. At most maxWanted names wait so.
func (s *sampler) want(name string) {
	s.wantMu.Lock()
	defer s.wantMu.Unlock()
	if len(s.wanted) < maxWanted {
		s.wanted[name] = true
	}
}

func (s *sampler) takeWanted() []string {
	s.wantMu.Lock()
	defer s.wantMu.Unlock()
	names := make([]string, 0, len(s.wanted))
	for n := range s.wanted {
		names = append(names, n)
	}
	clear(s.wanted)
	return names
}

// sample reads the names and publishes what it read; on failure the last
// good names stay, with the error. A tick lists the names again when the
// listing is old enough (listAgain), and adds a point to each history; an action's
// sample only shows what the action did. A read that Redis does not
// answer within the Timeout is left behind (a go-redis client without
// ContextTimeoutEnabled does not end it): the sample fails, and no other
// read starts until it ends.
func (s *sampler) sample(ctx context.Context, tick bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.readyOnce.Do(func() { close(s.ready) })
	if s.reading != nil {
		select {
		case <-s.reading:
			s.reading = nil
		default:
			s.fail(fmt.Errorf("Redis has not answered the read before for over %v", s.cfg.timeout))
			return
		}
	}
	list := tick && s.listAgain()
	names, wanted := s.names, s.takeWanted()
	rctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	done := make(chan struct{})
	var res readResult
	s.reads.Add(1)
	go func() {
		defer s.reads.Done()
		defer close(done)
		res = s.read(rctx, list, names, wanted)
	}()
	select {
	case <-done:
	case <-rctx.Done():
		s.reading = done
		if ctx.Err() == nil {
			s.fail(fmt.Errorf("Redis did not answer within %v", s.cfg.timeout))
		}
		return
	}
	now := time.Now()
	switch {
	case ctx.Err() != nil: // Close, or the action's request ended
	case res.err != nil:
		s.fail(res.err)
	default:
		s.names = res.names
		s.record(now, res.views, tick)
		s.publish(&snapshot{At: now, Names: res.views, Omitted: res.names.omitted, omittedFrom: res.names.omittedFrom})
	}
}

// fail publishes the last good sample with err.
func (s *sampler) fail(err error) {
	last := *s.latest.Load()
	last.Err = err.Error()
	s.publish(&last)
}

// publish makes snap the latest, unless the dashboard is closed.
func (s *sampler) publish(snap *snapshot) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if !s.closed.Load() {
		s.latest.Store(snap)
	}
}

// close marks the sampler closed, so that the pages say so, and waits
// for a read under way, at most closeWait.
func (s *sampler) close() {
	s.pubMu.Lock()
	s.closed.Store(true)
	last := *s.latest.Load()
	last.Err = errClosed.Error()
	s.latest.Store(&last)
	s.pubMu.Unlock()
	done := make(chan struct{})
	go func() { s.reads.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeWait):
	}
}

// readResult is what a read found: the names to read from now on, and
// their views.
type readResult struct {
	names listing
	views []nameView
	err   error
}

// read lists the names when list says so (else reads the listing's),
// with the wanted names that Redis holds state for, and reads each. It
// changes nothing of s's: it may outlive its sample.
func (s *sampler) read(ctx context.Context, list bool, names listing, wanted []string) readResult {
	if list {
		var err error
		if names, err = s.list(ctx); err != nil {
			return readResult{err: err}
		}
	}
	known := func(n string) bool { _, ok := slices.BinarySearch(names.names, n); return ok }
	wanted = slices.DeleteFunc(wanted, func(n string) bool {
		return n == "" || known(n) || (names.omitted > 0 && n >= names.omittedFrom)
	})
	all := append(slices.Clip(names.names), wanted...)
	reads, err := namestate.Each(ctx, all, func(ctx context.Context, name string) (nameRead, error) {
		if i := len(all) - len(wanted); slices.Index(all[i:], name) >= 0 {
			return readWanted(ctx, s.in, name)
		}
		return readName(ctx, s.in, name, names.sem[name]), nil
	})
	if err != nil {
		return readResult{err: err}
	}
	views := make([]nameView, 0, len(reads))
	found := false
	for _, r := range reads {
		if r.err != nil && !isReplyError(r.err) {
			return readResult{err: r.err} // Redis, not the name: the sample fails
		}
		if r.has {
			views = append(views, r.v)
			found = found || !known(r.v.Name)
		}
	}
	if found { // wanted names with state join the listing
		names = names.with(views, s.cfg.maxNames)
	}
	slices.SortFunc(views, func(a, b nameView) int { return cmp.Compare(a.Name, b.Name) })
	if len(views) > s.cfg.maxNames {
		views = views[:s.cfg.maxNames]
	}
	return readResult{names: names, views: views}
}

// list SCANs for the semaphores and rate limits, and keeps the first
// MaxNames names.
func (s *sampler) list(ctx context.Context) (listing, error) {
	now := time.Now()
	sems, err := s.in.Names(ctx, "")
	if err != nil {
		return listing{}, err
	}
	rates, err := s.in.RateNames(ctx, "")
	if err != nil {
		return listing{}, err
	}
	l := listing{at: now, took: time.Since(now), sem: make(map[string]bool, len(sems))}
	for _, n := range sems {
		l.sem[n] = true
	}
	l.names = slices.Compact(slices.Sorted(slices.Values(append(sems, rates...))))
	l.cut(s.cfg.maxNames)
	return l, nil
}

// cut keeps the first max names.
func (l *listing) cut(max int) {
	if len(l.names) > max {
		l.omitted += len(l.names) - max
		l.omittedFrom = l.names[max]
		l.names = l.names[:max]
	}
}

// with is l with the names of views that it lacks (new: they are not in
// l, which is not changed), cut at max.
func (l listing) with(views []nameView, max int) listing {
	out := listing{at: l.at, took: l.took, sem: make(map[string]bool, len(l.sem)+len(views)), omitted: l.omitted, omittedFrom: l.omittedFrom}
	for n, sem := range l.sem {
		out.sem[n] = sem
	}
	out.names = slices.Clone(l.names)
	for _, v := range views {
		if _, ok := slices.BinarySearch(out.names, v.Name); !ok {
			out.names = append(out.names, v.Name)
			out.sem[v.Name] = v.Semaphore
		}
	}
	slices.Sort(out.names)
	out.cut(max)
	return out
}

// nameRead is one name's read: has says whether Redis holds state for
// it; err is a reply error of that name's keys alone (a key of another
// type, say), which the name shows while the others are read.
type nameRead struct {
	v   nameView
	has bool
	err error
}

// readName reads a listed name; a failure is the name's (see nameRead).
func readName(ctx context.Context, in *inspect.Inspector, name string, sem bool) nameRead {
	if !sem {
		u, err := in.InUse(ctx, name)
		if err != nil {
			return withErr(nameRead{v: nameView{Name: name}, has: true}, err)
		}
		r, _, err := namestate.ReadRate(ctx, in, name)
		v := nameView{Name: name, Limits: []namestate.LimitInUse{}, Rates: namestate.RatesOf(u), Holders: []holderView{}, Waiters: []waiterView{}, Rate: &r}
		return withErr(nameRead{v: v, has: true}, err)
	}
	st, err := namestate.Read(ctx, in, name)
	return withErr(nameRead{v: semView(st), has: true}, err)
}

// readWanted reads a name that no listing found: a semaphore when Redis
// holds a fleet limit, a holder or a waiter for it, else a rate limit when
// it holds rate state.
func readWanted(ctx context.Context, in *inspect.Inspector, name string) (nameRead, error) {
	st, err := namestate.Read(ctx, in, name)
	if err != nil {
		return withErr(nameRead{v: semView(st), has: true}, err), nil
	}
	if st.FleetLimit != nil || len(st.Holders) > 0 || len(st.Waiters) > 0 {
		return nameRead{v: semView(st), has: true}, nil
	}
	if st.Rate != nil {
		return nameRead{v: nameView{Name: name, Limits: st.Limits, Rates: st.Rates, Holders: []holderView{}, Waiters: []waiterView{}, Rate: st.Rate}, has: true}, nil
	}
	return nameRead{}, nil
}

func withErr(r nameRead, err error) nameRead {
	if err != nil {
		r.err = err
		r.v = nameView{Name: r.v.Name, Semaphore: r.v.Semaphore, Limits: []namestate.LimitInUse{}, Rates: []namestate.RateInUse{},
			Holders: []holderView{}, Waiters: []waiterView{}, Err: err.Error()}
	}
	return r
}

// isReplyError says whether err is Redis's answer about a key (such as
// WRONGTYPE), not a failure to reach Redis or the end of the context.
func isReplyError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

func semView(st namestate.State) nameView {
	v := nameView{Name: st.Name, Semaphore: true, FleetLimit: st.FleetLimit, Limits: st.Limits, Rates: st.Rates, InUse: st.InUse, Rate: st.Rate, Learned: st.Learned,
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
// grants, saturation); a tick also adds them to the histories. An
// action's sample counts no grants (its interval since the tick before
// is short: a grant or two would chart as a spike), so the next tick
// counts them.
func (s *sampler) record(now time.Time, views []nameView, tick bool) {
	elapsed := now.Sub(s.prevAt).Seconds()
	first := s.prevAt.IsZero()
	waits := make(map[string]map[string]firstSeen, len(views))
	tokens := make(map[string]int64, len(views))
	points := make([]point, len(views))
	for i := range views {
		v := &views[i]
		if v.Err != "" { // keep what was known of it
			waits[v.Name], tokens[v.Name] = s.waits[v.Name], s.lastToken[v.Name]
			points[i] = gapPoint(now)
			continue
		}
		grants := s.countGrants(v, tokens, now)
		waits[v.Name] = s.ageWaiters(v, now, first)
		v.Saturated = saturated(*v)
		p := point{at: now.UnixMilli(), inUse: float32(v.InUse), limit: float32(math.NaN()), waiters: float32(len(v.Waiters)),
			grants: float32(math.NaN()), oldestWait: float32(v.OldestWaitMs) / 1000, learnedLimit: v.learnedLimit(), learnedRate: v.learnedRate()}
		if l := v.limit(); l != nil {
			p.limit = float32(*l)
		}
		if !first {
			p.grants = float32(float64(grants) / elapsed)
		}
		points[i] = p
	}
	s.waits = waits
	if tick {
		s.lastToken, s.prevAt = tokens, now
		s.addPoints(now, views, points)
	}
}

// addPoints adds each view's point to its history, a gap to the history
// of each name gone (so that no chart holds its last value across the
// time it was gone), forgets the histories of names gone for longer than
// the charts go back, and keeps at most MaxNames histories: those of the
// names seen last.
func (s *sampler) addPoints(now time.Time, views []nameView, points []point) {
	s.histMu.Lock()
	defer s.histMu.Unlock()
	capacity := int(s.cfg.keep/s.cfg.interval) + 1
	for i, v := range views {
		h, ok := s.hist[v.Name]
		if !ok {
			h = &history{}
			s.hist[v.Name] = h
		}
		h.add(points[i], capacity)
		h.seen = now
	}
	for name, h := range s.hist {
		switch {
		case now.Sub(h.seen) > s.cfg.keep:
			delete(s.hist, name)
		case h.seen.Before(now) && !h.gapped():
			h.add(gapPoint(now), capacity)
		}
	}
	if over := len(s.hist) - s.cfg.maxNames; over > 0 {
		byAge := make([]string, 0, len(s.hist))
		for name := range s.hist {
			byAge = append(byAge, name)
		}
		slices.SortFunc(byAge, func(a, b string) int { return s.hist[a].seen.Compare(s.hist[b].seen) })
		for _, name := range byAge[:over] {
			delete(s.hist, name)
		}
	}
}

// countGrants sets the holders' ages and returns how many of them were
// granted since the last tick: those whose token is above every token it
// saw (tokens only grow). A lease granted and released between two
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

// history returns name's points, oldest first (none when it has none).
func (s *sampler) history(name string) []point {
	s.histMu.Lock()
	defer s.histMu.Unlock()
	if h, ok := s.hist[name]; ok {
		return h.ordered()
	}
	return nil
}
