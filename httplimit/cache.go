package httplimit

import (
	"sync"
	"time"

	"github.com/redsem/redsem/limiter"
)

// idleAfter is how long a per-key semaphore stays cached without use;
// maxCached caps how many are cached at once.
const (
	idleAfter = time.Minute
	maxCached = 10_000
)

// semaphores caches the semaphores of one config by name, so a request
// does not rebuild its semaphore (options applied and validated, keys
// derived). Keys come from requests (API keys, hosts), so the cache must
// not grow with every key ever seen: an entry unused for idle is dropped
// by the next lookup after that, in a sweep that runs at most once per
// idle period, and while max entries are cached a new name's semaphore is
// used without being cached. Both are always safe: a Semaphore is a value
// naming Redis keys, a lease keeps the Semaphore it came from, and a
// later request makes an equal one, so the cap (which lives in Redis) is
// unaffected; only the few allocations the cache saves are spent again.
type semaphores struct {
	client *limiter.Client
	limit  int64
	opts   []limiter.Option
	idle   time.Duration
	max    int

	mu    sync.Mutex
	m     map[string]*cached
	swept time.Time
}

type cached struct {
	sem  *limiter.Semaphore
	used time.Time
}

func newSemaphores(client *limiter.Client, limit int64, opts []limiter.Option) *semaphores {
	return &semaphores{client: client, limit: limit, opts: opts, idle: idleAfter, max: maxCached,
		m: map[string]*cached{}, swept: time.Now()}
}

// get returns the semaphore named name, made on first use. Its errors are
// Client.Semaphore's: limiter.ErrClosed once the Client is closed (the
// config was validated when the cache was made).
func (s *semaphores) get(name string) (*limiter.Semaphore, error) {
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
		return c.sem, nil
	}
	sem, err := s.client.Semaphore(name, s.limit, s.opts...)
	if err != nil {
		return nil, err
	}
	if len(s.m) < s.max {
		s.m[name] = &cached{sem: sem, used: now}
	}
	return sem, nil
}

// len is the number of cached semaphores (for tests).
func (s *semaphores) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
