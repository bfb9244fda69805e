package limiter

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// Rate is a rate limit: on average Events per Per, and at most Burst at
// once. In any window of length w, a RateLimit lets through at most
// Burst + Events*w/Per events (GCRA's definition). "100 per minute, burst
// 20" is Rate{Events: 100, Per: time.Minute, Burst: 20}.
type Rate struct {
	Events int64
	Per    time.Duration
	Burst  int64
}

// maxPer bounds a rate's period, and maxBurst its burst: a day, and 2^40
// like a limit. The time one event takes (Per/Events) must be at least a
// microsecond, the scripts' unit.
const (
	maxPer   = 24 * time.Hour
	maxBurst = maxLimit
)

// String writes the rate as ParseRate reads it: "100/1m0s burst 20".
func (r Rate) String() string {
	return fmt.Sprintf("%d/%v burst %d", r.Events, r.Per, r.Burst)
}

// ParseRate reads "N/PERIOD" with an optional " burst B" (as String
// writes it), PERIOD a time.ParseDuration ("1m", "10s") or a bare unit
// ("s", "m", "h"): "100/m", "100/1m burst 20". Without a burst it is 1.
// A malformed rate gives an *ArgumentError naming "rate"; one out of
// range names its field ("rate.Per", as Validate).
func ParseRate(s string) (Rate, error) {
	bad := func(why string) (Rate, error) { return Rate{}, argError("rate", strconv.Quote(s), why) }
	body, burst, hasBurst := strings.Cut(strings.TrimSpace(s), " burst ")
	events, per, ok := strings.Cut(body, "/")
	if !ok {
		return bad(`want "N/PERIOD" or "N/PERIOD burst B", e.g. "100/1m burst 20"`)
	}
	r := Rate{Burst: 1}
	var err error
	if r.Events, err = strconv.ParseInt(strings.TrimSpace(events), 10, 64); err != nil {
		return bad("N is not a whole number")
	}
	per = strings.TrimSpace(per)
	if per != "" && !strings.ContainsAny(per[:1], "0123456789") {
		per = "1" + per
	}
	if r.Per, err = time.ParseDuration(per); err != nil {
		return bad("PERIOD is not a duration")
	}
	if hasBurst {
		if r.Burst, err = strconv.ParseInt(strings.TrimSpace(burst), 10, 64); err != nil {
			return bad("B is not a whole number")
		}
	}
	return r, r.check("rate")
}

// Validate returns an *ArgumentError naming the field of r that is out
// of range ("rate.Events", "rate.Per", "rate.Burst", or "rate" when one
// event would take less than a microsecond), or nil.
func (r Rate) Validate() error { return r.check("rate") }

// check returns an *ArgumentError naming arg when r is out of range.
func (r Rate) check(arg string) error {
	switch {
	case r.Events < 1 || r.Events > maxLimit:
		return argError(arg+".Events", r.Events, fmt.Sprintf("must be between 1 and %d", int64(maxLimit)))
	case r.Per <= 0 || r.Per > maxPer:
		return argError(arg+".Per", r.Per, fmt.Sprintf("must be above 0 and at most %v", maxPer))
	case r.Per/time.Duration(r.Events) < time.Microsecond:
		return argError(arg, r, "one event must take at least a microsecond (Per/Events)")
	case r.Burst < 1 || r.Burst > maxBurst:
		return argError(arg+".Burst", r.Burst, fmt.Sprintf("must be between 1 and %d", int64(maxBurst)))
	case r.Burst > int64(maxPer/(r.Per/time.Duration(r.Events))):
		return argError(arg+".Burst", r.Burst, fmt.Sprintf("must refill within %v (Burst*Per/Events)", maxPer))
	}
	return nil
}

// RateLimit is a fleet-wide rate limit: every process whose Client uses
// the same Redis, prefix and name shares it, on the server's clock. Each
// event reserves its time in Redis with one call (GCRA), so callers are
// served in the order they asked, paced exactly, and a wait costs no
// polling: the caller sleeps until its time.
type RateLimit struct {
	c    *Client
	name string
	rate Rate
	cfg  config
	keys store.Keyspace
	st   store.Rates
}

// RateLimit returns the rate limit named name with rate r (the fleet rate
// stored with SetRate, if any, overrides it). It shares the pause of the
// Semaphore of the same name (Pause). Options: AcquireTimeout bounds a
// wait (Wait's, and Reserve's); RestartQuarantine (on by default) makes a
// Redis that started less than a burst's refill ago, and has no state for
// the name, give no burst until then: it may have forgotten events made
// before its restart (a server that does not tell its uptime, such as
// miniredis, is taken as never restarted). A Redis that may evict keys is
// refused as for a Semaphore (AllowEviction). A bad name, rate or option gives an *ArgumentError;
// a Redlock Client gives ErrRatesUnsupported; after Close, ErrClosed.
//
// A restart forgets the times already reserved: their events still
// happen, and the rate after the restart comes on top of them for as far
// ahead as they were reserved (AcquireTimeout, 10s by default, bounds
// that; an unbounded wait does not).
func (c *Client) RateLimit(name string, r Rate, opts ...NameOption) (*RateLimit, error) {
	if name == "" {
		return nil, argError("name", `""`, "must not be empty")
	}
	if err := r.check("rate"); err != nil {
		return nil, err
	}
	cfg, err := with(c.cfg, opts)
	if err != nil {
		return nil, err
	}
	cfg.learn = cfg.learn.Within(r.Events)
	st, ok := c.st.(store.Rates)
	if !ok {
		return nil, ErrRatesUnsupported
	}
	if c.closedErr() != nil {
		return nil, ErrClosed
	}
	return &RateLimit{c: c, name: name, rate: r, cfg: cfg, keys: store.NewRateKeyspace(cfg.prefix, name), st: st}, nil
}

// Name returns the rate limit's name.
func (rl *RateLimit) Name() string { return rl.name }

// Rate returns the rate it was made with (the fleet rate, when one is
// stored, is FleetRate's).
func (rl *RateLimit) Rate() Rate { return rl.rate }

// Allow reports whether an event may happen now, and if so counts it: as
// AllowN(ctx, 1).
func (rl *RateLimit) Allow(ctx context.Context) (bool, error) { return rl.AllowN(ctx, 1) }

// AllowN reports whether an event of cost n may happen now, and if so
// counts it; if not, nothing is counted. It returns an error only for bad
// input (an *ArgumentError: n below 1 or above the burst) or a Redis
// failure (then it is not known whether the event was counted), with
// ctx's cancellation bounding the call.
func (rl *RateLimit) AllowN(ctx context.Context, n int64) (bool, error) {
	rep, err := rl.reserve(ctx, n, 0)
	return err == nil && rep.Reserved, err
}

// Wait waits until an event may happen: as WaitN(ctx, 1).
func (rl *RateLimit) Wait(ctx context.Context) error { return rl.WaitN(ctx, 1) }

// WaitN reserves the time of an event of cost n and sleeps until then
// (ReserveN, then Reservation.Wait: a pause set meanwhile moves the time
// past its end). It returns at once with a *BusyError (matching ErrBusy,
// and ErrTimeout) whose RetryIn is the wait, reserving nothing, when the
// wait would end after ctx's deadline or AcquireTimeout, and with one
// (Paused set, the time given back) when a pause moves it past
// AcquireTimeout during the sleep. When ctx ends during the sleep
// the reservation is given back where it can be (nothing was reserved
// after it) and ctx's error is returned; when the Client closes, the
// same with ErrClosed. Bad input gives an
// *ArgumentError; a Redis failure is returned wrapped (the event may have
// been counted).
func (rl *RateLimit) WaitN(ctx context.Context, n int64) error {
	r, err := rl.ReserveN(ctx, n)
	if err != nil {
		return err
	}
	return r.Wait(ctx)
}

// ReserveN reserves the time of an event of cost n, bounded as WaitN,
// and returns it without sleeping: the caller acts at its Time (Wait), or
// Cancels it. Until its time comes, a pause of the name that this Client
// hears of moves its time past the pause's end (see Reservation). Errors
// are WaitN's.
func (rl *RateLimit) ReserveN(ctx context.Context, n int64) (*Reservation, error) {
	if ctx == nil {
		return nil, argError("ctx", nil, "must not be nil")
	}
	start := time.Now()
	rep, err := rl.reserve(ctx, n, rl.maxWait(ctx))
	if err != nil {
		return nil, err
	}
	if !rep.Reserved {
		return nil, &BusyError{Name: rl.name, Weight: n, RetryIn: rep.Wait, Paused: rep.Paused, Rate: true, timedOut: true}
	}
	r := &Reservation{rl: rl, n: n, at: time.Now().Add(rep.Wait), prev: rep.Prev, next: rep.Next, learned: rep.Moved}
	if rep.Next != "" { // its time is to come: a pause may move it
		if rl.cfg.acquireTimeout > 0 {
			r.limit = start.Add(rl.cfg.acquireTimeout)
		}
		rl.c.hub.holds.hold(r)
	}
	return r, nil
}

// maxWait is how long ctx's deadline and AcquireTimeout let a reservation
// be off (-1: no bound).
func (rl *RateLimit) maxWait(ctx context.Context) time.Duration {
	bound := time.Duration(-1)
	if rl.cfg.acquireTimeout > 0 {
		bound = rl.cfg.acquireTimeout
	}
	if dl, ok := ctx.Deadline(); ok {
		left := max(time.Until(dl), 0)
		if bound < 0 || left < bound {
			bound = left
		}
	}
	return bound
}

// reserve checks the arguments and runs one reservation.
func (rl *RateLimit) reserve(ctx context.Context, n int64, maxWait time.Duration) (store.ReserveReply, error) {
	switch {
	case ctx == nil:
		return store.ReserveReply{}, argError("ctx", nil, "must not be nil")
	case n < 1:
		return store.ReserveReply{}, argError("n", n, "must be at least 1")
	}
	if err := rl.c.closedErr(); err != nil {
		return store.ReserveReply{}, err
	}
	// An evicted rate forgets its events: the next caller would get a
	// whole burst.
	if err := rl.c.checkEviction(ctx); err != nil {
		return store.ReserveReply{}, err
	}
	rl.c.uses.mark(useKey{name: rl.name, rate: rl.rate})
	req := store.ReserveRequest{Rate: store.Rate(rl.rate), N: n, MaxWait: maxWait, Careful: rl.cfg.quarantine > 0, Learn: rl.cfg.learn}
	if req.Learn.Start > 0 {
		req.Notice = store.PauseChannel(rl.c.cfg.prefix)
	}
	rep, err := bounded(rl.c, ctx, func() (store.ReserveReply, error) { return rl.st.Reserve(ctx, rl.keys, req) })
	switch {
	case err != nil:
		rl.cfg.observer.Rated(rl.name, outcomeError, 0)
		return rep, redisError("reserve", rl.name, err)
	case rep.TooBig > 0:
		return rep, argError("n", n, fmt.Sprintf("is above the burst of %q (%d): it could never go", rl.name, rep.TooBig))
	case rep.Reserved:
		rl.cfg.observer.Rated(rl.name, outcomeReserved, rep.Wait)
	default:
		rl.cfg.observer.Rated(rl.name, outcomeBusy, 0)
	}
	return rep, nil
}

// Reservation is the time an event was given by a RateLimit.
//
// A pause of the name (inspect.Inspector.Pause: an upstream's 429) set after the
// time was reserved moves it on: the pause moves the name's whole
// schedule by what it added, in Redis, and tells every Client by pub/sub;
// each moves its reservations whose time has not come, so the events
// keep the order and the pace they were reserved in (across processes),
// the first goes at the pause's end, and those reserved after the pause
// go after them. Time, Delay and Wait follow. Hearing of it costs nothing
// while no pause is set: the Client's one pub/sub connection, opened by
// its first reservation that has to wait, carries the notices. A pause
// set while that connection is down, or in the round trip after it was
// opened, is not heard: reservations then keep their times.
type Reservation struct {
	rl         *RateLimit
	n          int64
	at         time.Time // as reserved
	prev, next string    // the rate's tat before and after it ("": it went at once)
	limit      time.Time // AcquireTimeout's bound on its time (zero: none)

	// While it is held (holds.hold to holds.drop), the pauses its
	// Client hears of move it (holds.paused):
	nextUS int64 // next, parsed
	prevUS int64 // prev, parsed: its time, at burst 1
	// learned: when its learned rate last moved as it was reserved (µs,
	// server clock; 0: not learned): a rise after it draws it in.
	learned int64
	moved   atomic.Int64  // µs they moved it on
	kick    chan struct{} // tells Wait it moved
	held    bool          // under holds.mu
}

// Time is when the event may happen (this process's clock), moved on by
// the pauses this Client heard of since it was reserved.
func (r *Reservation) Time() time.Time { return r.at.Add(r.movedBy()) }

// Delay is how long from now until the event may happen (0: now).
func (r *Reservation) Delay() time.Duration { return max(time.Until(r.Time()), 0) }

func (r *Reservation) movedBy() time.Duration {
	return time.Duration(r.moved.Load()) * time.Microsecond
}

// Cancel gives the reservation back, so that a later caller may have its
// time, when nothing was reserved after it (later callers have their
// times already) and its time has not come; it reports whether it did.
// Its call to Redis is bounded by ReleaseTimeout and not by ctx's
// cancellation, as Release's; a Redis failure is returned wrapped.
// A pause no longer moves it afterwards.
func (r *Reservation) Cancel(ctx context.Context) (bool, error) {
	if ctx == nil {
		return false, argError("ctx", nil, "must not be nil")
	}
	r.rl.c.hub.holds.drop(r)
	if !time.Now().Before(r.Time()) {
		return false, nil
	}
	prev, next := r.prev, r.next
	if m := r.moved.Load(); m != 0 {
		// pause.lua moved the rate's tat on by as much.
		prev, next = addMicros(prev, m), addMicros(next, m)
	}
	rl := r.rl
	ctx, cancel := context.WithTimeout(detach(ctx), rl.cfg.releaseTimeout)
	defer cancel()
	ok, err := bounded(rl.c, ctx, func() (bool, error) { return rl.st.Unreserve(ctx, rl.keys, prev, next) })
	if err != nil {
		return false, redisError("cancel reservation", rl.name, err)
	}
	return ok, nil
}

// addMicros adds m to the decimal s (a tat in µs).
func addMicros(s string, m int64) string {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return s
	}
	return strconv.FormatInt(n+m, 10)
}

// Lateness is how long after its reservation's time an event may start
// and still be that reservation's (Renew): in any window of length w a
// name's events then start at most Burst + Events*(w + Lateness)/Per
// times. It is above a round trip, so that an event whose permit (say)
// came at once needs no second call.
const Lateness = 20 * time.Millisecond

// Renew makes a reservation whose time passed more than Lateness ago
// current, for an event about to start now: starting that late, it would
// bunch with the events reserved after it (ten reservations 100ms apart
// all waiting on one permit would start together). It then asks for an
// event now (AllowN of its cost: one call to Redis) and reports whether
// the rate had room; if not, the event must not start, and should
// reserve anew (without holding what it waited for, such as a permit,
// meanwhile). A reservation still current reports true at once; one that
// a pause moved to a time still to come reports false at once (the
// event must not start: Cancel it, or Wait for it). A pause no longer
// moves it afterwards. A Redis failure is returned wrapped; ctx bounds
// the call.
func (r *Reservation) Renew(ctx context.Context) (bool, error) {
	r.rl.c.hub.holds.drop(r)
	if r.moved.Load() != 0 && time.Now().Before(r.Time()) {
		return false, nil
	}
	if time.Since(r.Time()) <= Lateness {
		return true, nil
	}
	ok, err := r.rl.AllowN(ctx, r.n)
	if ok {
		r.at = time.Now()
		r.moved.Store(0)
	}
	return ok, err
}

// Wait sleeps until the reservation's time, following the pauses that
// move it meanwhile (see Reservation). When ctx ends first it gives the
// reservation back where it can (Cancel) and returns ctx's error wrapped;
// when the Client closes first, the same with ErrClosed. When a pause
// moves the time past AcquireTimeout's bound (counted from ReserveN), it
// gives it back and returns at once a *BusyError (matching ErrBusy and
// ErrTimeout) with Rate and Paused set and RetryIn the wait it would have
// had, as ReserveN would have; moved past ctx's deadline, it waits for
// ctx to end as above. A pause no longer moves it once Wait returned.
func (r *Reservation) Wait(ctx context.Context) error {
	if ctx == nil {
		return argError("ctx", nil, "must not be nil")
	}
	rl := r.rl
	defer rl.c.hub.holds.drop(r)
	var t *time.Timer
	for {
		d := r.Delay()
		if d == 0 {
			return nil
		}
		if r.moved.Load() != 0 && !r.limit.IsZero() && r.Time().After(r.limit) {
			rl.cfg.observer.Rated(rl.name, outcomeCanceled, 0)
			_, _ = r.Cancel(ctx)
			return &BusyError{Name: rl.name, Weight: r.n, RetryIn: d, Paused: true, Rate: true, timedOut: true}
		}
		if t == nil {
			t = time.NewTimer(d)
			defer t.Stop()
		} else {
			t.Reset(d)
		}
		select {
		case <-t.C:
		case <-r.kick: // moved: sleep again until the new time
		case <-ctx.Done():
			rl.cfg.observer.Rated(rl.name, outcomeCanceled, 0)
			_, _ = r.Cancel(ctx)
			return fmt.Errorf("limiter: wait %q: %w", rl.name, context.Cause(ctx))
		case <-rl.c.ctx.Done():
			_, _ = r.Cancel(context.Background())
			return fmt.Errorf("limiter: wait %q: %w", rl.name, ErrClosed)
		}
	}
}

// holds are a Client's reservations whose time may still move: from
// ReserveN until Wait returns, Cancel or Renew (or their time passed,
// when none of those is called), by rate key. A pause notice heard
// (store.PauseNotice) moves those it names; notices are kept a while
// (noticeKeep), for the reservations whose replies were on their way when
// the notice came: a reservation made before the pause has a Prev below
// the notice's Tat whenever it is seen.
type holds struct {
	mu      sync.Mutex
	by      map[string]*heldRate
	notices []heard // oldest first
}

type heldRate struct {
	rs      map[*Reservation]struct{}
	sweepAt int // sweep the passed ones when rs grows to this
}

type heard struct {
	n  store.PauseNotice
	at time.Time
}

// noticeKeep is how long a pause notice is kept for the reservations
// whose replies come after it: far above a round trip.
const noticeKeep = 5 * time.Second

// hold makes r follow the pauses this Client hears of, and starts
// listening for them.
func (h *holds) hold(r *Reservation) {
	next, err1 := strconv.ParseInt(r.next, 10, 64)
	prev, err2 := strconv.ParseInt(r.prev, 10, 64)
	if err1 != nil || err2 != nil {
		return
	}
	r.nextUS, r.prevUS, r.kick, r.held = next, prev, make(chan struct{}, 1), true
	key := r.rl.keys.Keys[0]
	now := time.Now()
	h.mu.Lock()
	if h.by == nil {
		h.by = map[string]*heldRate{}
	}
	hr := h.by[key]
	if hr == nil {
		hr = &heldRate{rs: map[*Reservation]struct{}{}, sweepAt: 64}
		h.by[key] = hr
	}
	hr.rs[r] = struct{}{}
	if len(hr.rs) >= hr.sweepAt {
		// Reservations whose time passed and that nobody dropped: a
		// caller of ReserveN that sleeps by itself. Swept when the set
		// doubled, so each costs O(1).
		for x := range hr.rs {
			if !x.Time().After(now) {
				delete(hr.rs, x)
				x.held = false
			}
		}
		hr.sweepAt = max(2*len(hr.rs), 64)
	}
	for _, n := range h.notices {
		if n.n.Key == key && now.Sub(n.at) < noticeKeep {
			r.pausedBy(n.n, now)
		}
	}
	h.mu.Unlock()
	r.rl.c.hub.listen()
}

// drop stops r following pauses.
func (h *holds) drop(r *Reservation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !r.held {
		return
	}
	r.held = false
	key := r.rl.keys.Keys[0]
	if hr := h.by[key]; hr != nil {
		delete(hr.rs, r)
		if len(hr.rs) == 0 {
			delete(h.by, key)
		}
	}
}

// paused moves the reservations that n names, and keeps n for those whose
// replies are still on their way.
func (h *holds) paused(n store.PauseNotice) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	keep := h.notices[:0]
	for _, o := range h.notices {
		if now.Sub(o.at) < noticeKeep {
			keep = append(keep, o)
		}
	}
	h.notices = append(keep, heard{n: n, at: now})
	if hr := h.by[n.Key]; hr != nil {
		for r := range hr.rs {
			r.pausedBy(n, now)
		}
	}
}

// pausedBy moves r on by n's pause when r was reserved before it and its
// time has not come (an event whose time came is under way). Called with
// holds.mu held.
func (r *Reservation) pausedBy(n store.PauseNotice, now time.Time) {
	// Made before it: its Prev below the notice's Tat (its Next at most
	// Tat, and a reservation made after has a Prev of at least Tat).
	// Prev, as moved here, is where reserve.lua and pause.lua left it
	// (its Next, drawn in by a rise's delta, may be above theirs).
	m := r.moved.Load()
	if r.prevUS+m >= n.Tat || !r.at.Add(time.Duration(m)*time.Microsecond).After(now) {
		return
	}
	if n.Rise() && (r.learned == 0 || r.learned >= n.End) {
		return // reserved after the rise (at its pace), or not learned
	}
	// Stretched by a cut learned rate, it moves as its time does (its
	// Prev, at burst 1; later at a greater burst, never sooner), and so do
	// its Prev and Next: a Cancel then finds no tat of its own and gives
	// nothing back.
	at := r.prevUS + m
	r.moved.Add(n.Stretch(at) - at)
	select {
	case r.kick <- struct{}{}:
	default:
	}
}
