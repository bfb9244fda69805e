package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// WhyState runs why.lua once.
func (s *Store) WhyState(ctx context.Context, k store.Keyspace, max int, wait string, quarantine time.Duration) (store.WhyState, error) {
	v, err := s.run(ctx, whyScript, k,
		max,                       // max_n
		wait,                      // wait
		quarantine.Milliseconds(), // quarantine_ms
	).Slice()
	if err != nil {
		return store.WhyState{}, err
	}
	if len(v) < 6 {
		return store.WhyState{}, errors.New("unexpected why reply")
	}
	st := store.WhyState{
		Now:        asInt(v[0]),
		PauseEnd:   asInt(v[1]),
		Quarantine: time.Duration(asInt(v[2])) * time.Millisecond,
		FleetLimit: asInt(v[3]),
		Limit:      asInt(v[4]),
	}
	n := int(asInt(v[5]))
	rest := v[6:]
	if n < 0 || len(rest) < 3*n || (len(rest)-3*n)%5 != 0 {
		return store.WhyState{}, errors.New("unexpected why reply")
	}
	st.Holders = make([]store.WhyHolder, n)
	for i := range st.Holders {
		h := rest[3*i:]
		st.Holders[i] = store.WhyHolder{Weight: asInt(h[0]), Token: asInt(h[1]), TTL: time.Duration(asInt(h[2])) * time.Millisecond}
	}
	rest = rest[3*n:]
	st.Waiters = make([]store.Waiter, len(rest)/5)
	for i := range st.Waiters {
		w := rest[5*i:]
		id, _ := w[0].(string)
		st.Waiters[i] = store.Waiter{ID: id, Weight: asInt(w[1]), TTL: time.Duration(asInt(w[2])) * time.Millisecond, Limit: asInt(w[3]),
			Quarantine: time.Duration(asInt(w[4])) * time.Millisecond}
	}
	return st, nil
}
