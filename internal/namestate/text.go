package namestate

import "fmt"

// Text is a fleet rate as limiter.ParseRate reads it, "-" when none is
// set (r nil).
func (r *RateJSON) Text() string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%d/%s burst %d", r.Events, r.Per, r.Burst)
}

// NextFreeText is "now", the wait written by dur, or "-" when unknown
// (ms nil).
func NextFreeText(ms *int64, dur func(ms int64) string) string {
	switch {
	case ms == nil:
		return "-"
	case *ms == 0:
		return "now"
	}
	return dur(*ms)
}

// PausedText is how long a name stays paused written by dur, "-" when
// it is not.
func PausedText(ms int64, dur func(ms int64) string) string {
	if ms == 0 {
		return "-"
	}
	return dur(ms)
}

// ReasonText is a waiter's reason in a few words: "full, 2 ahead".
func ReasonText(w Why) string {
	switch w.Reason {
	case "":
		return "next"
	case "full", "fleet-limit":
		return fmt.Sprintf("%s, %d ahead", w.Reason, w.Ahead)
	}
	return w.Reason
}

// ETAText is when a waiter should be granted: "~1.2s" when estimated,
// "1.2s" when known, "never" when it cannot be.
func ETAText(w Why, ttlText func(int64) string) string {
	switch {
	case w.ETAms == nil:
		return "never"
	case w.Estimated:
		return "~" + ttlText(*w.ETAms)
	}
	return ttlText(*w.ETAms)
}
