package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/internal/bridge"
	"github.com/redsem/redsem/limiter/internal/store"
)

// MaxPause bounds a pause (Inspector.Pause): a day, as a TTL.
const MaxPause = 24 * time.Hour

// Pause makes name grant nothing for d, for every process, on the
// server's clock. Its Semaphore grants no new lease (holders keep theirs,
// and a release grants no waiter): TryAcquire returns a *BusyError with
// Paused set, and waiters keep their places and are served in order from
// the pause's end, the head woken by a timer (no polling). Its RateLimit
// gives no event a time before the end, and then paces them from there
// (no burst at the end: an API that answered 429 is not sent a burst the
// moment it said to come back). Events reserved before the pause whose
// times have not come are moved on by what the pause added, in the order
// and at the pace they were reserved in, ahead of those reserved later:
// every Client that holds one hears of the pause on its pub/sub
// connection and moves it (Reservation), a few ms after the call; one
// whose connection is down then keeps its times. A pause already set for
// longer stays; Pause never shortens one (Unpause lifts it). It returns
// how long name is paused for from now. d outside (0, 24h] gives an
// *ArgumentError; a Redlock Client gives ErrRatesUnsupported; a Redis
// failure, or ctx ending, is returned wrapped (the pause may have been
// set all the same, and its reservations moved).
func (i *Inspector) Pause(ctx context.Context, name string, d time.Duration) (time.Duration, error) {
	if d <= 0 || d > MaxPause {
		return 0, bridge.ArgError("d", d, fmt.Sprintf("must be above 0 and at most %v", MaxPause))
	}
	left, err := i.pause(ctx, name, d, false)
	if err == nil {
		i.c.Paused(name)
	}
	return left, err
}

// Overload tells the fleet that the upstream behind name refused a call
// (a 429 or 503): it pauses name for retryAfter as Pause does (0: no
// pause), and cuts name's learned limit and learned rate (Adaptive; fixed
// ones are left alone) once per episode: the refusals that come from any
// process within the pause, or within a second, cut nothing more. Under
// an advertised rate (Advertise) it cuts only the limit, and holds it at
// most at the permits held less one for 30s. Events reserved at the old
// rate are re-paced at the new one from the pause's end (see
// Reservation). It returns how long name is paused for from now.
// retryAfter outside [0, 24h] gives an *ArgumentError; other errors are
// Pause's (the cut may have been made all the same).
func (i *Inspector) Overload(ctx context.Context, name string, retryAfter time.Duration) (time.Duration, error) {
	if retryAfter < 0 || retryAfter > MaxPause {
		return 0, bridge.ArgError("retryAfter", retryAfter, fmt.Sprintf("must be at least 0 and at most %v", MaxPause))
	}
	left, err := i.pause(ctx, name, retryAfter, true)
	if err == nil && retryAfter > 0 {
		i.c.Paused(name)
	}
	return left, err
}

// Advertise tells the fleet the quota the upstream behind name
// advertises (its RateLimit headers: q.Events per q.Per; Burst is
// ignored): name's learned rate (Adaptive) takes it at once, within its
// bounds, and grows no further while it stands, so the fleet goes
// straight there instead of probing for it with 429s; an Overload then
// cuts name's learned limit, not the rate (the headers speak for it; a
// spent quota is a Pause until its reset); another quota clears the
// limit's ceiling. Events reserved at a faster rate are re-paced, as
// after Overload's cut; those reserved at a slower one are drawn in to
// the new rate (not while paused). A fixed or pinned rate is left alone;
// SetRate's zero Rate forgets it. One call each: call it when the
// advertisement changes, not per response. A bad q
// gives an *ArgumentError naming "q"; other errors are Pause's (the rate
// may have been set all the same).
func (i *Inspector) Advertise(ctx context.Context, name string, q limiter.Rate) error {
	q.Burst = 1
	if err := bridge.CheckRate(store.Rate(q), "q"); err != nil {
		return err
	}
	_, err := i.signal(ctx, name, 0, false, store.Rate(q))
	return err
}

// Unpause lifts name's pause and wakes the semaphore's waiters that fit.
// Rate events reserved during the pause, or moved by it, keep their times
// (they were told when to go); new ones are timed after them. Errors are
// Pause's.
func (i *Inspector) Unpause(ctx context.Context, name string) error {
	_, err := i.pause(ctx, name, 0, false)
	return err
}

func (i *Inspector) pause(ctx context.Context, name string, d time.Duration, overload bool) (time.Duration, error) {
	return i.signal(ctx, name, d, overload, store.Rate{})
}

// signal runs pause.lua once: a pause for d (0 with neither overload nor
// adv: lift it), an overload's cut, an advertised rate.
func (i *Inspector) signal(ctx context.Context, name string, d time.Duration, overload bool, adv store.Rate) (time.Duration, error) {
	_, st, err := i.rateKeys(ctx, name)
	if err != nil {
		return 0, err
	}
	k := store.NewPauseKeyspace(i.c.Prefix, name)
	left, woken, err := st.Pause(ctx, k, d, overload, adv, i.c.Channel(k.WakeChannel(i.c.ID)), store.PauseChannel(i.c.Prefix))
	i.c.Wake(woken)
	if err != nil {
		return 0, bridge.RedisError("pause", name, err)
	}
	return left, nil
}

// RateState is what Redis holds for a rate limit's name.
type RateState struct {
	// Fleet is the fleet rate stored with SetRate (Events 0: none; each
	// RateLimit then uses its own).
	Fleet limiter.Rate
	// NextFree is how long until an event of cost 1 may go by the fleet
	// rate, a pause included (0: now; -1: unknown, since without a fleet
	// rate it depends on the asking RateLimit's).
	NextFree time.Duration
	// Paused is how long the name stays paused (0: not paused).
	Paused time.Duration
	// Known: Redis holds reservations for the name; else its burst is
	// whole (or it was never used), and NextFree is 0.
	Known bool
	// Learned is set when the rate is learned (Adaptive): Fleet is then
	// the rate it has learned.
	Learned *Learned
}

// Learned is the state of a learned limit or rate (Adaptive), in
// permits or events per the rate's Per.
type Learned struct {
	Min, Max int64   // its bounds
	Value    float64 // what it has learned (the limit or Events is its floor)
	// Overload is its value at its last overload (0: none yet: it grows
	// while all used), and Since how long ago that was.
	Overload float64
	Since    time.Duration
	// Moved is how long ago Value last moved (equal to Since: the
	// overload's cut moved it last).
	Moved time.Duration
	// Advertised, for a rate, is the rate the upstream advertises
	// (Advertise), which Value is set to and not grown past (0: none).
	// Ceiling, for a limit, is the permits an Overload under an
	// advertised rate found held, less one, which Value does not grow
	// past for 30s after that overload (0: none in force).
	Advertised, Ceiling float64
	// Pinned: SetLimit or SetRate stored the value; nothing moves it
	// until they clear it.
	Pinned bool
}

// Rate reads what Redis holds for the rate limit name. Errors are
// Pause's.
func (i *Inspector) Rate(ctx context.Context, name string) (RateState, error) {
	k, st, err := i.rateKeys(ctx, name)
	if err != nil {
		return RateState{}, err
	}
	s, err := st.RateState(ctx, k)
	if err != nil {
		return RateState{}, bridge.RedisError("read rate", name, err)
	}
	return RateState{Fleet: limiter.Rate(s.Fleet), NextFree: s.NextFree, Paused: s.Paused, Known: s.Known, Learned: learned(s.Learned, s.Now, false)}, nil
}

// ceilingLife is how long a learned limit's Ceiling holds after the
// overload that set it (adapt.lua's ADAPT_CEIL_US).
const ceilingLife = 30 * time.Second

// learned reads adapt.lua's state (see there) at now (µs, server clock),
// a limit's if limit.
func learned(v string, now int64, limit bool) *Learned {
	if v == "pin" {
		return &Learned{Pinned: true}
	}
	var l Learned
	var tOver, tMove, hold int64
	var adv float64
	// The eighth field, adv, is there only when set.
	if n, _ := fmt.Sscan(v, &l.Min, &l.Max, &l.Value, &l.Overload, &tOver, &tMove, &hold, &adv); n < 7 {
		return nil
	}
	if l.Overload > 0 {
		l.Since = time.Duration(now-tOver) * time.Microsecond
	}
	switch {
	case !limit:
		l.Advertised = adv
	case l.Overload > 0 && l.Since < ceilingLife:
		l.Ceiling = adv
	}
	l.Moved = time.Duration(now-tMove) * time.Microsecond
	return &l
}

// SetRate stores in Redis a rate that every process's RateLimit of name
// obeys in place of its own, until SetRate with the zero Rate clears it:
// "100/min" becomes "60/min" fleet-wide with one call. Events reserved
// already keep their times; later ones are paced by the new rate. While
// a rate is stored, the name's state does not expire. It pins a learned
// rate (Adaptive): nothing moves it; the zero Rate clears both the rate
// and what was learned, and learning starts again. A bad rate gives an
// *ArgumentError naming "rate"; other errors are Pause's (the rate may
// have been stored all the same).
func (i *Inspector) SetRate(ctx context.Context, name string, r limiter.Rate) error {
	if r != (limiter.Rate{}) {
		if err := bridge.CheckRate(store.Rate(r), "rate"); err != nil {
			return err
		}
	}
	k, st, err := i.rateKeys(ctx, name)
	if err != nil {
		return err
	}
	if err := st.SetRate(ctx, k, store.Rate(r)); err != nil {
		return bridge.RedisError("set rate", name, err)
	}
	return nil
}

// RateNames lists, sorted, the rate limits under the Client's prefix
// that have state in Redis (used within a minute of its burst refilling,
// or with a stored rate) and whose name matches the glob match, as Names
// does.
func (i *Inspector) RateNames(ctx context.Context, match string) ([]string, error) {
	return i.names(ctx, store.RatePattern(i.c.Prefix), match, "rate names")
}

// rateKeys checks the arguments and the Client, and returns name's rate
// keys and the store that keeps rates.
func (i *Inspector) rateKeys(ctx context.Context, name string) (store.Keyspace, store.Rates, error) {
	switch {
	case ctx == nil:
		return store.Keyspace{}, nil, bridge.ArgError("ctx", nil, "must not be nil")
	case name == "":
		return store.Keyspace{}, nil, bridge.ArgError("name", `""`, "must not be empty")
	}
	st, ok := i.c.Store.(store.Rates)
	if !ok {
		return store.Keyspace{}, nil, limiter.ErrRatesUnsupported
	}
	return store.NewRateKeyspace(i.c.Prefix, name), st, i.c.Closed()
}
