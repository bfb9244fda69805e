package httplimit

import (
	"sync"
	"time"

	"github.com/redsem/redsem/limiter"
)

// idleAfter is how long a per-key gate stays cached without use;
// maxCached caps how many are cached at once.
const (
	idleAfter = time.Minute
	maxCached = 10_000
)

// gate is what a request of one name passes: its rate limit, then its
// semaphore. Either may be nil (the config has no Rate, or no Limit), not
// both.
type gate struct {
	rl    *limiter.RateLimit
	sem   *limiter.Semaphore
	heard *heard   // what this process told of the name's advertised quota
	lat   *latency // its answer times here (CutOnLatency)
}

// gates caches the gates of one config by name, so a request does not
// rebuild its semaphore and rate limit (options applied and validated,
// keys derived). Keys come from requests (API keys, hosts), so the cache
// must not grow with every key ever seen: an entry unused for idle is
// dropped by the next lookup after that, in a sweep that runs at most
// once per idle period, and while max entries are cached a new name's
// gate is used without being cached. Both are always safe: a Semaphore or
// RateLimit is a value naming Redis keys, a lease keeps the Semaphore it
// came from, and a later request makes an equal one, so the caps (which
// live in Redis) are unaffected; only the few allocations the cache saves
// are spent again.
type gates struct {
	client   *limiter.Client
	limit    int64        // 0: no semaphore
	rate     limiter.Rate // zero: no rate limit
	semOpts  []limiter.NameOption
	rateOpts []limiter.NameOption
	idle     time.Duration
	max      int

	mu    sync.Mutex
	m     map[string]*cached
	swept time.Time
}

type cached struct {
	gate
	used time.Time
}

func newGates(client *limiter.Client, limit int64, rate limiter.Rate, semOpts, rateOpts []limiter.NameOption) *gates {
	return &gates{client: client, limit: limit, rate: rate, semOpts: semOpts, rateOpts: rateOpts,
		idle: idleAfter, max: maxCached, m: map[string]*cached{}, swept: time.Now()}
}

// get returns the gate of name, made on first use. Its errors are
// Client.Semaphore's and Client.RateLimit's: limiter.ErrClosed once the
// Client is closed (the config was validated when the cache was made).
func (s *gates) get(name string) (gate, error) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.swept) >= s.idle {
		for k, c := range s.m {
			if now.Sub(c.used) >= s.idle {
				delete(s.m, k)
			}
		}
		s.swept = now
	}
	if c, ok := s.m[name]; ok {
		c.used = now
		return c.gate, nil
	}
	g, err := s.make(name)
	if err != nil {
		return gate{}, err
	}
	if len(s.m) < s.max {
		s.m[name] = &cached{gate: g, used: now}
	}
	return g, nil
}

// make builds the gate of name.
func (s *gates) make(name string) (g gate, err error) {
	g.heard, g.lat = &heard{}, &latency{}
	if s.rate != (limiter.Rate{}) {
		if g.rl, err = s.client.RateLimit(name, s.rate, s.rateOpts...); err != nil {
			return gate{}, err
		}
	}
	if s.limit > 0 {
		if g.sem, err = s.client.Semaphore(name, s.limit, s.semOpts...); err != nil {
			return gate{}, err
		}
	}
	return g, nil
}

// len is the number of cached gates (for tests).
func (s *gates) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
