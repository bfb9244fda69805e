package namestate

import (
	"fmt"
	"strings"

	"github.com/redsem/redsem/limiter/inspect"
)

// LimitInUse is a Semaphore limit that Processes processes' Clients
// apply to a name (limiter.LimitInUse).
type LimitInUse struct {
	Limit     int64 `json:"limit"`
	Processes int   `json:"processes"`
}

// RateInUse is a rate that Processes processes' Clients apply to a name
// (limiter.RateInUse): its fields and "processes".
type RateInUse struct {
	RateJSON
	Processes int `json:"processes"`
}

// LimitsOf and RatesOf are u's values as State lists them: empty, never
// null, when none is recorded.
func LimitsOf(u inspect.InUse) []LimitInUse {
	out := make([]LimitInUse, 0, len(u.Limits))
	for _, l := range u.Limits {
		out = append(out, LimitInUse(l))
	}
	return out
}

func RatesOf(u inspect.InUse) []RateInUse {
	out := make([]RateInUse, 0, len(u.Rates))
	for _, r := range u.Rates {
		out = append(out, RateInUse{RateJSON: *RateJSONOf(r.Rate), Processes: r.Processes})
	}
	return out
}

// Effective is the limit a name's semaphore runs at: the fleet limit
// when set, else the one limit its processes agree on; nil when they
// disagree or none is known.
func Effective(fleet *int64, limits []LimitInUse) *int64 {
	switch {
	case fleet != nil:
		return fleet
	case len(limits) == 1:
		return &limits[0].Limit
	}
	return nil
}

// EffectiveRate is Effective for a rate.
func EffectiveRate(fleet *RateJSON, rates []RateInUse) *RateJSON {
	switch {
	case fleet != nil:
		return fleet
	case len(rates) == 1:
		return &rates[0].RateJSON
	}
	return nil
}

// LimitsText is the limits in use, "5 (3 procs), 4 (1 proc)"; with
// counts false, the one value processes agree on is "5". "-" when none
// is recorded.
func LimitsText(limits []LimitInUse, counts bool) string {
	parts := make([]string, len(limits))
	for i, l := range limits {
		parts[i] = fmt.Sprint(l.Limit)
	}
	return inUseText(parts, processesOf(limits, func(l LimitInUse) int { return l.Processes }), counts)
}

// RatesText is LimitsText for rates: "18/1s burst 1 (3 procs)".
func RatesText(rates []RateInUse, counts bool) string {
	parts := make([]string, len(rates))
	for i := range rates {
		parts[i] = rates[i].RateJSON.Text()
	}
	return inUseText(parts, processesOf(rates, func(r RateInUse) int { return r.Processes }), counts)
}

func processesOf[T any](xs []T, n func(T) int) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = n(x)
	}
	return out
}

func inUseText(values []string, procs []int, counts bool) string {
	switch {
	case len(values) == 0:
		return "-"
	case len(values) == 1 && !counts:
		return values[0]
	}
	for i, p := range procs {
		unit := "procs"
		if p == 1 {
			unit = "proc"
		}
		values[i] += fmt.Sprintf(" (%d %s)", p, unit)
	}
	return strings.Join(values, ", ")
}
