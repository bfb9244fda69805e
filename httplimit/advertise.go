package httplimit

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/redsem/redsem/limiter"
)

// heard is what this process last told the fleet of one name's
// advertised quota, so that a signal goes to Redis once (and once per
// retellEvery), not with every response that repeats it. It lives in the
// name's cached gate: a name past the cache's bound signals with each
// response that advertises.
type heard struct {
	mu     sync.Mutex
	quota  limiter.Rate // the quota last advertised (zero: none)
	told   time.Time    // when it was
	paused time.Time    // the end of the pause set for a spent quota
}

// retellEvery is how often a quota that stands is told again: Redis may
// have forgotten it (a restart that emptied it, or the day without a
// move after which a learned rate's keys expire, which under a steady
// quota is every day), and the learned rate would then start again from
// its start and probe for the quota with 429s. Telling the same quota
// again moves nothing (and keeps the keys). As the in-use records, every
// 10s.
const retellEvery = 10 * time.Second

// answered acts on resp, the upstream's answer to req: a 429 or 503
// pauses and cuts (pauseOn); the rate limit headers it advertises are
// read (parseAdvertised): a new quota goes to the fleet (advertise), and
// a spent one pauses it (pauseSpent); another answer's time, took, is
// measured (timed: CutOnLatency).
func (t *Transport) answered(req *http.Request, name string, g gate, resp *http.Response, took time.Duration) {
	adv := advertised{remaining: -1}
	if hasAdvertised(resp.Header) {
		adv = parseAdvertised(resp.Header, time.Now())
		t.advertise(req, name, g, adv)
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		t.pauseOn(req, name, g, resp, adv)
		return
	}
	t.timed(req, name, g, took)
	t.pauseSpent(req, name, g, adv)
}

// hasAdvertised says whether h may advertise a quota: most answers do
// not, and cost no parse.
func hasAdvertised(h http.Header) bool {
	for _, k := range []string{"Ratelimit", "Ratelimit-Policy", "Ratelimit-Limit", "Ratelimit-Remaining",
		"X-Ratelimit-Limit", "X-Ratelimit-Remaining"} {
		if _, ok := h[k]; ok {
			return true
		}
	}
	return false
}

// advertise tells the fleet the quota adv advertises, a limit per
// window, when it is not the one this process told last, or was told
// retellEvery ago (inspect.Inspector.Advertise: a learned rate takes it, within its
// bounds, instead of probing for it with 429s). A window past a day is
// taken as its share of a day (a Rate's longest Per). A failure is
// logged, and told again with the next answer.
func (t *Transport) advertise(req *http.Request, name string, g gate, adv advertised) {
	if g.rl == nil || adv.limit == 0 || adv.window == 0 {
		return
	}
	q := limiter.Rate{Events: adv.limit, Per: adv.window}
	if day := 24 * time.Hour; q.Per > day {
		q = limiter.Rate{Events: int64(float64(q.Events) * float64(day) / float64(q.Per)), Per: day}
	}
	h := g.heard
	now := time.Now()
	h.mu.Lock()
	last, lastTold := h.quota, h.told
	if q == last && now.Sub(lastTold) < retellEvery {
		h.mu.Unlock()
		return
	}
	h.quota, h.told = q, now // before the call: the answers in flight with it send nothing
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), pauseTimeout)
	defer cancel()
	err := t.inspector.Advertise(ctx, name, q)
	var ae *limiter.ArgumentError
	switch {
	case err == nil, errors.As(err, &ae), errors.Is(err, limiter.ErrRatesUnsupported):
		// Told, or never to be: a quota no Rate can hold (under one a day,
		// or faster than one a µs) is ignored.
	default:
		h.mu.Lock()
		if h.quota == q && h.told == now {
			h.quota, h.told = last, lastTold
		}
		h.mu.Unlock()
		t.logger.Warn("httplimit: advertised rate not set", "name", name, "quota", q, "err", err)
	}
}

// pauseSpent pauses name for every process when adv says its quota is
// spent (no call remaining, and a reset ahead), until the reset, at most
// PauseOnRetryAfter's bound: what a 429 with Retry-After would do, before
// the 429. Once per pause for this process: the answers that come during
// it send nothing. A failure is logged.
func (t *Transport) pauseSpent(req *http.Request, name string, g gate, adv advertised) {
	if t.maxPause == 0 || adv.remaining != 0 || adv.reset <= 0 {
		return
	}
	d := min(adv.reset, t.maxPause)
	if !g.heard.pausing(d) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), pauseTimeout)
	defer cancel()
	if _, err := t.inspector.Pause(ctx, name, d); err != nil && !errors.Is(err, limiter.ErrRatesUnsupported) {
		t.logger.Warn("httplimit: pause failed", "name", name, "cause", "advertised quota spent",
			"pause", d, "err", err)
	}
}

// pausing says whether a pause of d from now is news to this process (no
// pause it set is still running), and takes it as set.
func (h *heard) pausing(d time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if now.Before(h.paused) {
		return false
	}
	h.paused = now.Add(d)
	return true
}

// advertised says whether this process told the fleet a quota for the
// name.
func (h *heard) advertised() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.quota != (limiter.Rate{})
}
