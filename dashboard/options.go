package dashboard

import (
	"fmt"
	"time"

	"github.com/redsem/redsem/limiter"
)

// Option configures a Dashboard. Invalid values make New return a
// *limiter.ArgumentError naming the option.
type Option func(*config)

type config struct {
	interval time.Duration
	keep     time.Duration
	maxNames int
	timeout  time.Duration // 0: the default, from the interval
	actions  bool
	token    string
	source   string
}

// Defaults of the Interval, History and MaxNames options.
const (
	DefaultInterval = time.Second
	DefaultHistory  = 15 * time.Minute
	DefaultMaxNames = 1000
)

// MinTokenLen is the shortest token Actions takes: a guessable token
// must not guard the actions.
const MinTokenLen = 8

// MinInterval is the shortest Interval.
const MinInterval = 50 * time.Millisecond

func defaultConfig() config {
	return config{interval: DefaultInterval, keep: DefaultHistory, maxNames: DefaultMaxNames}
}

// Interval is how often the sampler reads the known names from Redis, and
// how often the pages update; at least 50ms. The names are listed (SCAN)
// again every interval, or, where that costs Redis more than a twentieth
// of its time (a large keyspace), every 20 times what a listing takes,
// and at least every 30s.
func Interval(d time.Duration) Option { return func(c *config) { c.interval = d } }

// History is how far back the charts go (in memory, lost on restart); at
// least 10 intervals and at most a day.
func History(d time.Duration) Option { return func(c *config) { c.keep = d } }

// MaxNames bounds the names sampled: beyond it (in name order) names are
// neither shown nor charted, and the overview says how many were left
// out. It bounds the dashboard's memory and its load on Redis.
func MaxNames(n int) Option { return func(c *config) { c.maxNames = n } }

// Timeout bounds each sample's reads (default 10 intervals, at least 5s).
// A go-redis client made without ContextTimeoutEnabled ends a read only at
// its ReadTimeout, however the context ends: past Timeout the dashboard
// then leaves that read behind, says the sample failed and starts no other
// read until it ends. Either way the pages and /metrics say the sample
// failed once none came for 3 intervals.
func Timeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// Actions turns the actions on (release a lease, set a fleet limit or
// rate, pause, unpause), each a POST that must carry token in the
// X-Redsem-Token header or the token form field and come from the
// dashboard's own origin. Without it the dashboard is read-only and shows
// no controls. token must have at least 8 characters.
func Actions(token string) Option {
	return func(c *config) { c.actions, c.token = true, token }
}

// Source says on the pages where the dashboard reads from (an address);
// never pass a password or a URL that holds one.
func Source(s string) Option { return func(c *config) { c.source = s } }

func (c config) with(opts []Option) (config, error) {
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	switch {
	case c.interval < MinInterval:
		return c, argError("Interval", c.interval, "must be at least 50ms")
	case c.keep < 10*c.interval || c.keep > 24*time.Hour:
		return c, argError("History", c.keep, fmt.Sprintf("must be between 10 intervals (%v) and 24h", 10*c.interval))
	case c.timeout < 0:
		return c, argError("Timeout", c.timeout, "must not be negative")
	case c.maxNames < 1:
		return c, argError("MaxNames", c.maxNames, "must be at least 1")
	case c.actions && len(c.token) < MinTokenLen:
		return c, argError("Actions", "(token hidden)", fmt.Sprintf("the token must have at least %d characters", MinTokenLen))
	}
	if c.timeout == 0 {
		c.timeout = max(10*c.interval, 5*time.Second)
	}
	return c, nil
}

// argError is the limiter's error for a bad argument, so that one
// errors.Is(err, limiter.ErrInvalidArgument) serves both packages.
func argError(arg string, value any, reason string) error {
	return &limiter.ArgumentError{Arg: arg, Value: value, Reason: reason}
}
