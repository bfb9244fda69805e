package httplimit

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// advertised is what an upstream's rate limit headers say of its quota.
// The forms read, the first found of each field winning:
//   - the IETF draft's current fields (draft-ietf-httpapi-ratelimit-headers
//     -08 on): RateLimit-Policy: "p";q=100;w=60 and RateLimit: "p";r=42;t=18;
//   - its earlier ones: RateLimit-Policy: 100;w=60 (or the policies in
//     RateLimit-Limit: 100, 100;w=60), the combined RateLimit: limit=100,
//     remaining=42, reset=18, and RateLimit-Limit, -Remaining, -Reset;
//   - GitHub's X-RateLimit-Limit, -Remaining, -Reset (epoch seconds).
//
// Several policies: the one of the lowest rate (q/w) is the quota, the
// one the fleet can keep to; several remaining counts: the lowest, with
// its reset. Values that do not parse are ignored, as if not sent.
type advertised struct {
	limit     int64         // the quota: calls per window (0: not said)
	window    time.Duration // its window (0: not said: the quota is no rate)
	remaining int64         // calls left until reset (-1: not said)
	reset     time.Duration // until the quota is whole again (0: not said or past)
}

// resetEpochFrom tells an epoch (GitHub's, seconds since 1970) from a
// delta (the IETF draft's seconds from now) by its size, as common
// clients do: no delta is 30 years long.
const resetEpochFrom = 1e9

// parseAdvertised reads h's rate limit headers at now.
func parseAdvertised(h http.Header, now time.Time) advertised {
	a := advertised{remaining: -1}
	a.policies(h.Values("RateLimit-Policy"))
	a.rateLimit(h.Values("RateLimit"), now)
	limit := h.Values("RateLimit-Limit")
	a.policies(limit)
	for _, prefix := range []string{"RateLimit-", "X-RateLimit-"} {
		if a.limit == 0 {
			if prefix == "RateLimit-" && len(limit) > 0 {
				a.limit = quota(members(strings.Join(limit, ","))[0][0])
			} else {
				a.limit = quota(h.Get(prefix + "Limit"))
			}
		}
		if a.remaining < 0 {
			if n, err := strconv.ParseInt(strings.TrimSpace(h.Get(prefix+"Remaining")), 10, 64); err == nil && n >= 0 {
				a.remaining, a.reset = n, resetIn(h.Get(prefix+"Reset"), now)
			}
		}
	}
	return a
}

// policies reads quota policies: items "q;w=W" or `"name";q=Q;w=W`; the
// lowest rate wins.
func (a *advertised) policies(vs []string) {
	for _, m := range members(strings.Join(vs, ",")) {
		q := quota(m[0])
		if v, ok := param(m, "q"); ok {
			q = quota(v)
		}
		w, ok := param(m, "w")
		window := seconds(w)
		if q == 0 || !ok || window <= 0 {
			continue
		}
		if a.window == 0 || float64(q)/window.Seconds() < float64(a.limit)/a.window.Seconds() {
			a.limit, a.window = q, window
		}
	}
}

// rateLimit reads the RateLimit field: a dictionary (limit=, remaining=,
// reset=) or items with r= (remaining) and t= (reset).
func (a *advertised) rateLimit(vs []string, now time.Time) {
	for _, m := range members(strings.Join(vs, ",")) {
		key, v, dict := strings.Cut(m[0], "=")
		switch {
		case dict && key == "limit" && a.limit == 0:
			a.limit = quota(v)
		case dict && key == "remaining":
			if r, _, ok := remainingAt(v, "", now); ok && (a.remaining < 0 || r < a.remaining) {
				a.remaining = r
			}
		case dict && key == "reset":
			a.reset = resetIn(v, now) // the dictionary has one remaining
		case !dict:
			rv, _ := param(m, "r")
			tv, _ := param(m, "t")
			if r, t, ok := remainingAt(rv, tv, now); ok && (a.remaining < 0 || r < a.remaining) {
				a.remaining, a.reset = r, t
			}
		}
	}
}

// remainingAt reads a remaining count and its reset.
func remainingAt(r, t string, now time.Time) (int64, time.Duration, bool) {
	n, err := strconv.ParseInt(r, 10, 64)
	if err != nil || n < 0 {
		return 0, 0, false
	}
	return n, resetIn(t, now), true
}

// members splits a structured field's list or dictionary into its
// members, each its parts (the item, then its parameters), trimmed and
// unquoted. Quoted strings with commas or semicolons in them are not
// handled: none of the fields read needs them.
func members(v string) [][]string {
	var out [][]string
	for _, m := range strings.Split(v, ",") {
		parts := strings.Split(m, ";")
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		if parts[0] != "" || len(parts) > 1 {
			out = append(out, parts)
		}
	}
	if len(out) == 0 {
		out = [][]string{{""}}
	}
	return out
}

// param returns the value of the parameter key of a member.
func param(m []string, key string) (string, bool) {
	for _, p := range m[1:] {
		if k, v, ok := strings.Cut(p, "="); ok && strings.TrimSpace(k) == key {
			return strings.Trim(strings.TrimSpace(v), `"`), true
		}
	}
	return "", false
}

// quota reads a quota: a whole number of calls, at least 1 (0: none).
func quota(v string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 1 {
		return 0
	}
	return n
}

// seconds reads a non-negative number of seconds, fractions allowed (0:
// none, or out of range).
func seconds(v string) time.Duration {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(f) || f <= 0 || f > 1e9 {
		return 0 // 1e9 s, 30 years: no window, nor an overflow
	}
	return time.Duration(f * float64(time.Second))
}

// resetIn reads a reset, delta seconds or epoch seconds (resetEpochFrom),
// as the time from now (0: none, malformed, or past).
func resetIn(v string, now time.Time) time.Duration {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(f) || f <= 0 {
		return 0
	}
	if f >= resetEpochFrom {
		if f > math.MaxInt64/float64(time.Second) {
			return 0
		}
		return max(time.Unix(0, int64(f*float64(time.Second))).Sub(now), 0)
	}
	return time.Duration(f * float64(time.Second))
}
