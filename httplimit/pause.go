package httplimit

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/redsem/redsem/limiter"
)

// pauseTimeout bounds the Pause call after a 429 or 503: the response is
// already here, and an unreachable Redis must not hold it back for long.
const pauseTimeout = 2 * time.Second

// pauseOn tells the fleet of an overload, resp a 429 or a 503
// (Inspector.Overload): it pauses name, for every process, as long as
// its Retry-After asks, or else until the reset of a quota adv says is
// spent (GitHub's answer past its limit), at most maxPause (none without
// either), so that its
// rate gives no slot and its semaphore no new permit before the end, and
// it cuts name's rate where it is learned (limiter.Adaptive; its limit
// where the rate is advertised). A spent quota whose rate this process
// advertised is the quota's 429, not the calls at once': a pause alone.
// The
// upstream said when to come back: sending before then would only earn
// more 429s, from every process. The call is detached from the
// request's cancellation (the caller going away does not make the
// upstream want requests sooner) and bounded by pauseTimeout; a failure
// is logged, and resp goes back to the caller unchanged either way.
func (t *Transport) pauseOn(req *http.Request, name string, g gate, resp *http.Response, adv advertised) {
	if t.maxPause == 0 {
		return
	}
	d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	switch {
	case ok:
	case adv.remaining == 0:
		d = adv.reset // 0 when none is ahead
	default:
		d = 0 // no pause: the cut alone
	}
	d = min(d, t.maxPause)
	if d > 0 {
		g.heard.pausing(d) // the answers in flight that say spent send nothing
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), pauseTimeout)
	defer cancel()
	var err error
	if adv.remaining == 0 && g.heard.advertised() {
		if d > 0 {
			_, err = t.inspector.Pause(ctx, name, d)
		}
	} else {
		_, err = t.inspector.Overload(ctx, name, d)
	}
	// A Redlock Client keeps no rates: there is nothing to pause or cut.
	if err != nil && !errors.Is(err, limiter.ErrRatesUnsupported) {
		t.logger.Warn("httplimit: pause failed", "name", name, "cause", "upstream overload",
			"status", resp.StatusCode, "pause", d, "err", err)
	}
}

// parseRetryAfter reads a Retry-After header, delay-seconds or an
// HTTP-date (RFC 9110, 10.2.3), as the wait from now. ok is false for an
// empty or malformed header, and for a wait that is already over: then
// nothing is paused.
func parseRetryAfter(h string, now time.Time) (d time.Duration, ok bool) {
	if secs, err := strconv.ParseUint(h, 10, 63); err == nil {
		// Beyond any bound: saturate rather than overflow.
		d = time.Duration(min(secs, uint64(maxPause/time.Second)+1)) * time.Second
	} else if at, err := http.ParseTime(h); err == nil {
		d = at.Sub(now)
	} else {
		return 0, false
	}
	return d, d > 0
}
