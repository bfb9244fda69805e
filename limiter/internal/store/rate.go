package store

import (
	"context"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redsem/redsem/internal/glob"
)

// Rates is implemented by a Store that keeps fleet-wide rates: one Redis
// deployment, not a quorum (a quorum of independent rates would let
// through up to N/quorum times the rate, on clocks that disagree).
type Rates interface {
	// Reserve runs GCRA once: it reserves the event's time on the server
	// clock, or says how long it would have to wait.
	Reserve(ctx context.Context, k Keyspace, r ReserveRequest) (ReserveReply, error)
	// Unreserve gives a reservation back when nothing was reserved after
	// it (Prev and Next of its reply); it reports whether it did.
	Unreserve(ctx context.Context, k Keyspace, prev, next string) (bool, error)
	// SetRate stores (Events > 0) or clears the fleet-wide rate.
	SetRate(ctx context.Context, k Keyspace, r Rate) error
	// RateState reads what Redis holds for the name.
	RateState(ctx context.Context, k Keyspace) (RateState, error)
	// Pause makes the name of k (NewPauseKeyspace: the pause is the
	// name's, its rate's too) grant nothing for d from now on the
	// server's clock (a longer pause set before stays), moves on the
	// times its rate reserved by what the pause added and, when it did,
	// publishes a PauseNotice on notice ("": none); d == 0 lifts the
	// pause and wakes the waiters that fit, returning the caller's own
	// (channel). It returns how long the name is paused for.
	// overload: the upstream refused, and a learned rate is cut too
	// (adapt.lua); d may then be 0 (no pause). adv (Events > 0): the
	// rate the upstream advertises, which a learned rate takes
	// (adapt.lua); d may then be 0 too.
	Pause(ctx context.Context, k Keyspace, d time.Duration, overload bool, adv Rate, channel, notice string) (left time.Duration, woken []string, err error)
}

// Rate is at most Burst events at once and Events per Per on average.
type Rate struct {
	Events int64
	Per    time.Duration
	Burst  int64
}

// Interval is the time one event takes from the rate (GCRA's emission
// interval).
func (r Rate) Interval() time.Duration { return r.Per / time.Duration(r.Events) }

// ReserveRequest asks for the time of an event of cost N.
type ReserveRequest struct {
	Rate Rate // the asker's; a fleet rate in Redis overrides it
	N    int64
	// MaxWait: a reservation further off than this is not made (-1: no
	// bound; 0: only an event that may go now).
	MaxWait time.Duration
	// Careful: a name Redis has no state for, on a server that started
	// less than a burst's refill ago, is taken as having spent its burst
	// just before the start (it may have been forgotten by a restart).
	Careful bool
	// Learn: the rate is learned between Learn.Min and Rate.Events,
	// from Learn.Start (zero: a fixed rate).
	Learn Learn
	// Notice is where a learned rate's rise re-paces the reservations
	// made before it (PauseChannel; "": nowhere).
	Notice string
}

// Learn is where a learned limit or rate may go, in permits or events
// per the Rate's Per.
type Learn struct{ Min, Start int64 }

// Within is l with its min and start at most bound (the limit or the
// Events): one Adaptive serves names of different bounds.
func (l Learn) Within(bound int64) Learn {
	return Learn{Min: min(l.Min, bound), Start: min(l.Start, bound)}
}

// ReserveReply is the answer to a ReserveRequest.
type ReserveReply struct {
	Reserved bool
	// Wait is how long from the reply the event goes (Reserved), or would
	// have had to wait (not Reserved).
	Wait   time.Duration
	Paused bool  // the wait is (at least) a pause's
	TooBig int64 // N is above the burst (this one) and never fits; 0 otherwise
	// Prev and Next are the state before and after the reservation, which
	// Unreserve restores when nothing moved it since.
	Prev, Next string
	// Moved is when a learned rate last moved (µs, server clock), 0 for a
	// fixed rate: a rise's PauseNotice (End then) re-paces only the
	// reservations whose Moved is below its End, made before it.
	Moved int64
}

// RateState is what Redis holds for a rate.
type RateState struct {
	Fleet Rate // the fleet rate SetRate stored (Events 0: none)
	// Known: Redis holds reservations for the name (else its burst is
	// whole, or it was never used).
	Known bool
	// NextFree is how long until an event of cost 1 may go (0: now).
	NextFree time.Duration
	// Tat is how long until the rate's theoretical arrival time (0 when
	// not Known): with a RateLimit's own rate, its next event may go
	// Burst-1 intervals before it.
	Tat time.Duration
	// Paused is how long the name stays paused (0: not paused).
	Paused time.Duration
	// Learned is the learned rate's state as adapt.lua keeps it ("":
	// none; "pin": set by SetRate), read at Now (µs, server clock).
	Learned string
	Now     int64
}

const (
	rateSuffix  = "}:rate"
	fleetSuffix = "}:rate:fleet"
	movedSuffix = "}:rate:moved"
	adaptSuffix = "}:rate:adapt"
	usedSuffix  = "}:rate:used"
	pauseSuffix = "}:pause"
)

// NewRateKeyspace returns the keys of the rate name under prefix, all
// strings: its GCRA state, its pause, its fleet rate, what the last
// pause moved (pause.lua), the learned rate's state (adapt.lua) and the
// semaphore's state of the same name (whose fleet limit, when all used,
// keeps a learned rate from growing: reserve.lua) and the events a
// learned rate reserved in the last two seconds (its use, which an
// overload cuts it from: pause.lua). The
// hash tag is the semaphore's of the same name, so a pause is one key
// for both.
func NewRateKeyspace(prefix, name string) Keyspace {
	tag := prefix + "{" + tagEscaper.Replace(name)
	keys := []string{tag + rateSuffix, tag + pauseSuffix, tag + fleetSuffix, tag + movedSuffix, tag + adaptSuffix, tag + stateSuffix, tag + usedSuffix}
	return Keyspace{Keys: keys, Args: []any{keys[0], keys[1], keys[2], keys[3], keys[4], keys[5], keys[6]}}
}

// NewPauseKeyspace returns the keys Pause runs on: the semaphore's of
// name (NewKeyspace), then its rate's state, whose reserved times a pause
// moves on, the record of that move, and the fleet rate and learned
// state an overload cuts.
func NewPauseKeyspace(prefix, name string) Keyspace {
	k := NewKeyspace(prefix, name, 1)
	rate := NewRateKeyspace(prefix, name).Keys
	for _, i := range []int{0, 3, 2, 4, 6} {
		k.Keys = append(k.Keys, rate[i])
		k.Args = append(k.Args, rate[i])
	}
	return k
}

// PauseChannel is where the pauses of every name under prefix are told
// (PauseNotice), published by plain PUBLISH: a Cluster's bus takes it to
// every node, so one subscription anywhere hears them all (and one per
// shard on a Ring). Pauses are rare; wake-ups, which are not, go by each
// name's shard channel there.
func PauseChannel(prefix string) string { return prefix + "pause" }

// PauseNotice says that a pause moved a rate's reserved times on: every
// reservation of the rate key Key whose Next (its tat) is at most Tat was
// made before the pause, and its time moves on by Moved (µs, as its Prev
// and Next do, so that Unreserve still finds it). End is the pause's end
// (µs, server clock). Scale above 1: an overload cut a learned rate, and
// each such Next, once moved, is stretched from End by Scale (see
// Stretch); 1 otherwise. Scale below 1 (and Moved 0): a learned rate
// rose at End (reserve.lua), and the reservations made before it (Next
// at most Tat, ReserveReply.Moved below End) are drawn in towards End.
type PauseNotice struct {
	Key             string
	End, Tat, Moved int64
	Scale           float64
}

// Rise reports whether n re-paces for a rise (Scale below 1): it moves
// only the reservations whose reply's Moved is below End.
func (n PauseNotice) Rise() bool { return n.Scale < 1 }

// Stretch is where the notice moves a reserved time t (µs): on by Moved,
// then stretched (or drawn in) from End by Scale as pause.lua and
// reserve.lua move tat (the same doubles, so the same result).
func (n PauseNotice) Stretch(t int64) int64 {
	to := t + n.Moved
	if n.Scale != 1 && to > n.End {
		// The product converted on its own: Go may otherwise fuse the
		// multiply-add, which Lua never does, and round differently.
		return int64(math.Ceil(float64(n.End) + float64(float64(to-n.End)*n.Scale)))
	}
	return to
}

// ParsePauseNotice reads a notice as pause.lua publishes it on
// PauseChannel(prefix): "end tat moved key", or "end tat moved xscale
// key" when it re-paces (reserve.lua's rise too). Every key there starts
// with prefix, and the scale's word only when the prefix does too and it
// is followed by the prefix again: a prefix may hold spaces.
func ParsePauseNotice(msg, prefix string) (PauseNotice, bool) {
	f := strings.SplitN(msg, " ", 4)
	if len(f) != 4 {
		return PauseNotice{}, false
	}
	n := PauseNotice{Scale: 1}
	if sc, key, ok := strings.Cut(f[3], " "); ok && strings.HasPrefix(sc, "x") && strings.HasPrefix(key, prefix+"{") {
		if v, err := strconv.ParseFloat(sc[1:], 64); err == nil && v > 0 {
			n.Scale, f[3] = v, key
		}
	}
	var err [3]error
	n.End, err[0] = strconv.ParseInt(f[0], 10, 64)
	n.Tat, err[1] = strconv.ParseInt(f[1], 10, 64)
	n.Moved, err[2] = strconv.ParseInt(f[2], 10, 64)
	if err[0] != nil || err[1] != nil || err[2] != nil || n.Moved < 0 || (n.Moved == 0 && n.Scale == 1) || f[3] == "" {
		return PauseNotice{}, false
	}
	n.Key = f[3]
	return n, true
}

// RatePattern is the SCAN pattern of the rate keys under prefix, the
// state's and the fleet rate's (see StatePattern).
func RatePattern(prefix string) string {
	return glob.Escape(prefix) + "{*" + rateSuffix + "*"
}

// NameOfRateKey undoes NewRateKeyspace for a rate key, the state's or
// the fleet rate's (see NameOfStateKey).
func NameOfRateKey(key string) (string, bool) {
	if name, ok := nameOf(key, rateSuffix); ok {
		return name, true
	}
	return nameOf(key, fleetSuffix)
}
