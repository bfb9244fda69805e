package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redsem/redsem/limiter"
)

// CutOnLatency makes a Transport cut a key's learned limit and rate
// (limiter.Adaptive in LimiterOptions) when its answers come slow, before
// the upstream sheds: when 5 answers in a row, over at least a
// baseline's time, each took over tolerance times the key's baseline in
// this process (a long-term average of the time from the request written
// to the answer's first byte, as Gradient2's), it calls
// inspect.Inspector.Overload without a pause: a 429's cut, once per
// episode for the whole fleet. At most once a second per process and
// key; the call is detached from the request's cancellation and bounded
// by 2s, and a failure is logged. It is made before the slow answer is
// returned: with Redis slow or down, that answer waits up to 2s more.
// 0 (the default) turns it off; 1.5 is
// Gradient2's tolerance; one not above 1 makes NewTransport return a
// *limiter.ArgumentError naming "CutOnLatency". Without a learned value
// the call cuts nothing; a key past the gate cache's bound (10,000 keys
// in use) is not measured. Middleware ignores it. Why: docs/adaptive.md.
func CutOnLatency(tolerance float64) Option {
	return func(o *options) { o.latencyTolerance = tolerance }
}

// The latency signal's measure (docs/adaptive.md): the baseline is an
// exponential average over latencyWindow answers, from the median of the
// first latencyWarmup (Gradient2's long RTT, over 600 after 10, starts
// from their mean: a process's first calls, dialling while it starts,
// took up to 4 times the upstream's on a loaded machine); the short term
// is a run of at least latencyRun answers, each over the tolerance, that
// lasts a baseline or more (one slow answer, a GC pause or a slow
// endpoint, is not an overload, nor is a short stall of the process that
// delays every answer at once); a signal is sent at most once per
// latencyQuiet (the law holds a cut for at least a second: another
// signal then cuts nothing).
const (
	latencyWindow = 600
	latencyWarmup = 10
	latencyRun    = 5
	latencyQuiet  = time.Second
)

// latency is one key's answer times in this process.
type latency struct {
	mu   sync.Mutex
	warm [latencyWarmup]float64 // the first answers' times (s)
	n    int                    // how many of them were measured
	base float64                // the baseline, in seconds
	run  int                    // answers in a row over the tolerance
	from time.Time              // the first of them
	told time.Time              // the last signal
}

// slow adds one answer's time took, and says whether the answers are
// slow enough to signal now (an answer past the run, the quiet period
// over); it then counts the signal as sent.
func (l *latency) slow(took time.Duration, tolerance float64, now time.Time) bool {
	s := took.Seconds()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n < latencyWarmup {
		l.warm[l.n] = s
		l.n++
		if l.n == latencyWarmup {
			slices.Sort(l.warm[:])
			l.base = l.warm[latencyWarmup/2]
		}
		return false
	}
	base := l.base
	l.base += (s - l.base) * 2 / (latencyWindow + 1)
	switch {
	case s <= tolerance*base:
		l.run = 0
		return false
	case l.run == 0:
		l.from = now
	}
	l.run++
	if l.run < latencyRun || now.Sub(l.from).Seconds() < base || now.Sub(l.told) < latencyQuiet {
		return false
	}
	l.run, l.told = 0, now
	return true
}

// stopwatch times one call: from its request written to the first byte
// of the answer (httptrace), the upstream's time without the dial, the
// TLS handshake or the wait for a pooled connection, which grow with the
// process's own calls in flight (http.Transport keeps 2 idle connections
// per host by default); from the send to the headers where the base
// transport does not trace. Times are UnixNano; the trace's callbacks
// run on the transport's goroutines.
type stopwatch struct {
	sent         time.Time
	wrote, first atomic.Int64
}

// timing returns req traced, and its stopwatch started, when the
// latency is measured; else req and nil (nothing is allocated).
func (t *Transport) timing(req *http.Request) (*http.Request, *stopwatch) {
	if t.latencyTolerance == 0 {
		return req, nil
	}
	w := &stopwatch{sent: time.Now()}
	trace := &httptrace.ClientTrace{
		WroteRequest:         func(httptrace.WroteRequestInfo) { w.wrote.Store(time.Now().UnixNano()) },
		GotFirstResponseByte: func() { w.first.Store(time.Now().UnixNano()) },
	}
	return req.WithContext(httptrace.WithClientTrace(req.Context(), trace)), w
}

// took is the call's time (see stopwatch); 0 unmeasured (w nil).
func (w *stopwatch) took() time.Duration {
	if w == nil {
		return 0
	}
	if wrote, first := w.wrote.Load(), w.first.Load(); wrote != 0 && first >= wrote {
		return time.Duration(first - wrote)
	}
	return time.Since(w.sent)
}

// timed measures an answer that took took (not a 429 or
// 503: those signal on their own), and tells the fleet of an overload
// (Overload, no pause) when the key's answers have turned slow. The call
// is detached from the request's cancellation and bounded by
// pauseTimeout, as pauseOn's.
func (t *Transport) timed(req *http.Request, name string, g gate, took time.Duration) {
	if t.latencyTolerance == 0 || !g.lat.slow(took, t.latencyTolerance, time.Now()) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), pauseTimeout)
	defer cancel()
	if _, err := t.inspector.Overload(ctx, name, 0); err != nil && !errors.Is(err, limiter.ErrRatesUnsupported) {
		t.logger.Warn("httplimit: overload not told", "name", name, "cause", "slow answers", "took", took, "err", err)
	}
}

// checkTolerance checks CutOnLatency's tolerance.
func checkTolerance(tolerance float64) error {
	if tolerance == 0 || tolerance > 1 {
		return nil
	}
	return fmt.Errorf("httplimit: %w", &limiter.ArgumentError{Arg: "CutOnLatency", Value: tolerance,
		Reason: "must be above 1, or 0 (off)"})
}
