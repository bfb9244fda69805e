package dashboard

import (
	"math"
	"time"

	"github.com/redsem/redsem/internal/namestate"
)

// nameView is one name in a sample, as the pages, their JSON and
// /metrics show it: a semaphore, a rate limit, or both.
type nameView struct {
	Name string `json:"name"`
	// Semaphore: Redis holds semaphore state for the name (else it is a
	// rate limit only).
	Semaphore  bool   `json:"semaphore"`
	FleetLimit *int64 `json:"fleet_limit"` // null: each process uses its own
	// Limits are the limits its processes apply, Rates their rates, each
	// with how many processes apply it (namestate.State's).
	Limits  []namestate.LimitInUse `json:"limits"`
	Rates   []namestate.RateInUse  `json:"rates"`
	InUse   int64                  `json:"in_use"`
	Holders []holderView           `json:"holders"` // oldest grant first
	Waiters []waiterView           `json:"waiters"` // in serving order
	// OldestWaitMs is the age of the longest waiting request (0: none).
	OldestWaitMs int64 `json:"oldest_wait_ms"`
	// Learned is the state of a learned limit (limiter.Adaptive): then
	// FleetLimit is what it learned; null otherwise. A learned rate's is
	// Rate's.
	Learned *namestate.Learned `json:"learned"`
	// Rate is the rate limit of the name: null when it has no fleet rate,
	// no reservations and no pause.
	Rate *namestate.Rate `json:"rate"`
	// Saturated: paused, someone waits, the fleet limit is reached, or
	// the rate's next event is not free now.
	Saturated bool `json:"saturated"`
	// Err is why the name could not be read (a key of another type under
	// the prefix, say); the other names are read all the same.
	Err string `json:"error,omitempty"`
}

// holderView is a lease, with its age.
type holderView struct {
	namestate.Holder
	// AgeMs is how long ago the lease was granted or handed over, read
	// from its fencing token (never below the Redis server's time in µs
	// at grant) against this host's clock: off by the clocks' skew, and
	// null when the token is no such time.
	AgeMs *int64 `json:"age_ms"`
}

// waiterView is a queued request, with its age.
type waiterView struct {
	namestate.Waiter
	// AgeMs is how long ago the sampler first saw the request queued;
	// AgeAtLeast: it was queued already at the dashboard's first sample,
	// so that it waits longer than AgeMs.
	AgeMs      int64 `json:"age_ms"`
	AgeAtLeast bool  `json:"age_at_least"`
}

// plausibleToken bounds the tokens read as times (µs): from 2001 on, and
// not ahead of this host by more than a minute.
const plausibleToken = 1_000_000_000_000_000

// tokenAge is how long ago a lease whose fencing token is token was
// granted, or nil when token is no time.
func tokenAge(token int64, now time.Time) *int64 {
	age := now.Sub(time.UnixMicro(token))
	if token < plausibleToken || age < -time.Minute {
		return nil
	}
	ms := max(age, 0).Milliseconds()
	return &ms
}

// saturated says whether v's name lets nothing more through now.
func saturated(v nameView) bool {
	if r := v.Rate; r != nil && (r.PausedMs > 0 || (r.NextFreeMs != nil && *r.NextFreeMs > 0)) {
		return true
	}
	l := v.limit()
	return len(v.Waiters) > 0 || (l != nil && v.InUse >= *l)
}

// limit is the limit the name runs at: the fleet limit, else the one its
// processes agree on; nil when they disagree or none is known.
func (v nameView) limit() *int64 { return namestate.Effective(v.FleetLimit, v.Limits) }

// fill is the share of the limit in use, or -1 when the limit is not
// known.
func (v nameView) fill() float64 {
	l := v.limit()
	if l == nil || *l == 0 {
		return -1
	}
	return float64(v.InUse) / float64(*l)
}

// learnedLimit is the learned limit, or the pinned one (NaN: neither).
func (v nameView) learnedLimit() float32 {
	switch l := v.Learned; {
	case l == nil:
		return float32(math.NaN())
	case l.Pinned && v.FleetLimit != nil:
		return float32(*v.FleetLimit)
	case l.Pinned:
		return float32(math.NaN())
	}
	return float32(v.Learned.Value)
}

// learnedRate is the learned rate per second, or the pinned one (NaN:
// neither).
func (v nameView) learnedRate() float32 {
	nan := float32(math.NaN())
	if v.Rate == nil || v.Rate.Learned == nil || v.Rate.FleetRate == nil {
		return nan
	}
	per, err := time.ParseDuration(v.Rate.FleetRate.Per)
	if err != nil || per <= 0 {
		return nan
	}
	events := v.Rate.Learned.Value
	if v.Rate.Learned.Pinned {
		events = float64(v.Rate.FleetRate.Events)
	}
	return float32(events / per.Seconds())
}
