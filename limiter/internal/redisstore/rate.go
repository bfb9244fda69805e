package redisstore

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// Reserve runs reserve.lua once.
func (s *Store) Reserve(ctx context.Context, k store.Keyspace, r store.ReserveRequest) (store.ReserveReply, error) {
	maxWait := int64(-1)
	if r.MaxWait >= 0 {
		maxWait = r.MaxWait.Microseconds()
	}
	careful := "0"
	if r.Careful {
		careful = "1"
	}
	res, err := s.run(ctx, reserveScript, k,
		interval(r.Rate), // asked_interval_us
		r.Rate.Burst,     // asked_burst
		r.N,              // n
		maxWait,          // max_wait_us
		careful,          // careful
		learn(r),         // learn
		r.Notice,         // notice
	).Result()
	if err != nil {
		return store.ReserveReply{}, err
	}
	v, ok := res.([]any)
	if !ok { // 1: reserved, to go now
		return store.ReserveReply{Reserved: true}, nil
	}
	switch asInt(v[0]) {
	case 1:
		rep := store.ReserveReply{Reserved: true, Wait: micros(v[1])}
		if len(v) >= 4 {
			rep.Prev, rep.Next = asString(v[2]), asString(v[3])
		}
		if len(v) == 5 {
			rep.Moved, _ = strconv.ParseInt(asString(v[4]), 10, 64)
		}
		return rep, nil
	case 0:
		return store.ReserveReply{Wait: micros(v[1]), Paused: asInt(v[2]) == 1}, nil
	}
	return store.ReserveReply{TooBig: asInt(v[1])}, nil
}

// interval is r's emission interval in µs, as reserve.lua computes it
// from a fleet rate (per_ns / 1000 / events, in doubles), written so that
// Lua reads back the same double: the script then divides nothing.
func interval(r store.Rate) string {
	return strconv.FormatFloat(float64(r.Per.Nanoseconds())/1000/float64(r.Events), 'g', -1, 64)
}

// learn is reserve.lua's learn: "min start max per_ns", or "" for a
// fixed rate.
func learn(r store.ReserveRequest) string {
	if r.Learn.Start == 0 {
		return ""
	}
	return fmt.Sprintf("%d %d %d %d", r.Learn.Min, r.Learn.Start, r.Rate.Events, r.Rate.Per.Nanoseconds())
}

// Unreserve runs unreserve.lua once.
func (s *Store) Unreserve(ctx context.Context, k store.Keyspace, prev, next string) (bool, error) {
	n, err := s.run(ctx, unreserveScript, k,
		prev, // prev
		next, // next_tat
	).Int64()
	return n == 1, err
}

// SetRate runs setrate.lua once.
func (s *Store) SetRate(ctx context.Context, k store.Keyspace, r store.Rate) error {
	return s.run(ctx, setRateScript, k,
		r.Events,            // events
		r.Per.Nanoseconds(), // per_ns
		r.Burst,             // burst
	).Err()
}

// Pause runs pause.lua once.
func (s *Store) Pause(ctx context.Context, k store.Keyspace, d time.Duration, overload bool, adv store.Rate, channel, notice string) (time.Duration, []string, error) {
	// Whole µs, rounded up: a pause shorter than one is a pause of one.
	us := any("lift")
	switch {
	case d > 0:
		us = (d + time.Microsecond - 1).Microseconds()
	case overload || adv.Events > 0:
		us = 0 // no pause: the cut, or the advertised rate, alone
	}
	over := "0"
	if overload {
		over = "1"
	}
	advertised := ""
	if adv.Events > 0 {
		advertised = fmt.Sprintf("%d %d", adv.Events, adv.Per.Nanoseconds())
	}
	v, err := s.run(ctx, pauseScript, k,
		us,         // d_us
		channel,    // own
		notice,     // notice
		over,       // overload
		advertised, // advertised
	).Slice()
	if err != nil || len(v) == 0 {
		return 0, nil, err
	}
	return micros(v[0]), stringsOf(v[1:]), nil
}

// RateState runs ratestate.lua once.
func (s *Store) RateState(ctx context.Context, k store.Keyspace) (store.RateState, error) {
	v, err := s.run(ctx, rateStateScript, k).StringSlice()
	if err != nil {
		return store.RateState{}, err
	}
	var st store.RateState
	st.Paused = micros(v[2])
	st.Learned, st.Now = v[4], atoi(v[3])
	if f := strings.Fields(v[1]); len(f) == 3 {
		st.Fleet = store.Rate{Events: atoi(f[0]), Per: time.Duration(atoi(f[1])), Burst: atoi(f[2])}
	}
	// The key outlives tat (reserve.lua's RATE_KEEP_US); past tat the
	// burst is whole, as when there is no key.
	if v[0] != "" && atoi(v[0]) > atoi(v[3]) {
		st.Known = true
		st.Tat = time.Duration(atoi(v[0])-atoi(v[3])) * time.Microsecond
		if st.Fleet.Events > 0 {
			// When the next event of cost 1 may go, by the fleet rate; a
			// process's own rate is not known here.
			free := time.Duration(atoi(v[0])-atoi(v[3]))*time.Microsecond - time.Duration(st.Fleet.Burst-1)*st.Fleet.Interval()
			st.NextFree = max(free, 0, st.Paused)
		} else {
			st.NextFree = -1
		}
	}
	return st, nil
}

// micros reads a reply's whole microseconds, saturating past what a
// Duration holds.
func micros(v any) time.Duration {
	us := asInt(v)
	if us > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// asInt reads a reply's number, sent as an integer or as a decimal
// string (fmt in common.lua, for numbers past 2^53's precision in Lua).
func asInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		return atoi(x)
	}
	return 0
}

func asString(v any) string {
	s, _ := v.(string)
	return s
}

var _ store.Rates = (*Store)(nil)
