package asynqmw

import (
	"context"
	"sync"
	"time"

	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// appliedFor is how long a rate read from Redis stands for the process,
// and appliedMax how many names it keeps (a Key rule's rates are one per
// key; past it the cache starts empty).
const (
	appliedFor = time.Second
	appliedMax = 1024
)

// appliedRates caches, per rate name, the rate the fleet applies where
// it differs from the rule's Rate: learned (limiter.Adaptive) or set
// (inspect.Inspector.SetRate). holdBound is that rate's, or a holder's
// slot is deemed far whenever the applied rate is below the rule's, and
// the task gives its permits back for nothing. It is read only when a
// holder's slot is further off than the cached rate puts it, at most
// once per appliedFor and name: a fleet whose slots come when its
// rule's rate says sends no read.
type appliedRates struct {
	mu    sync.Mutex
	rates map[string]applied
}

type applied struct {
	rate limiter.Rate
	at   time.Time
}

// get returns the rate cached for g, or g's rule's Rate.
func (a *appliedRates) get(g gate) limiter.Rate {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r, ok := a.rates[g.name]; ok {
		return r.rate
	}
	return g.r.Rate
}

// refresh returns the rate the fleet applies to g, read from Redis
// unless it was less than appliedFor ago. A failed read gives the rate
// cached, or g's rule's.
func (a *appliedRates) refresh(ctx context.Context, c *limiter.Client, g gate) limiter.Rate {
	a.mu.Lock()
	old, ok := a.rates[g.name]
	a.mu.Unlock()
	if ok && time.Since(old.at) < appliedFor {
		return old.rate
	}
	st, err := inspect.New(c).Rate(ctx, g.name)
	if err != nil {
		return a.get(g)
	}
	now := applied{rate: g.r.Rate, at: time.Now()}
	if st.Fleet.Events > 0 {
		now.rate = st.Fleet
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.rates == nil || len(a.rates) >= appliedMax {
		a.rates = map[string]applied{}
	}
	a.rates[g.name] = now
	return now.rate
}

// interval is the time between two events of r.
func interval(r limiter.Rate) time.Duration { return r.Per / time.Duration(r.Events) }
