package store

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Uses is implemented by a Store that records the limits and rates its
// Clients apply to each name (one Redis deployment; a quorum records
// none): the keep-alive writes them, the Inspector reads them.
type Uses interface {
	// RecordUses writes, for every record, owner's values for its name,
	// to last ttl from now on the server's clock; a value written again
	// lasts ttl from then.
	RecordUses(ctx context.Context, owner string, ttl time.Duration, records []UseRecord) error
	// ReadUses reads the live values of k (NewUseKeyspace) and the fleet
	// limit and rate that override them.
	ReadUses(ctx context.Context, k Keyspace) (UseState, error)
}

// UseRecord is one Client's values for one name: LimitValue and
// RateValue strings.
type UseRecord struct {
	Key    string // the name's use key (NewUseKeyspace's Keys[2])
	Values []string
}

// UseState is what Redis holds of a name's limits in use.
type UseState struct {
	FleetLimit int64 // SetLimit's or learned (0: none)
	FleetRate  Rate  // SetRate's (Events 0: none)
	// Learned is a learned limit's state as adapt.lua keeps it ("": none;
	// "pin": set by SetLimit since), read at Now (µs, server clock).
	Learned string
	Now     int64
	// Owners maps each value (LimitValue, RateValue) to the Clients that
	// applied it lately.
	Owners map[string]int
}

const useSuffix = "}:inuse"

// NewUseKeyspace returns the keys that say what name runs at: its
// semaphore's state (whose 'cap' is the fleet limit), its fleet rate,
// and its use key, a ZSET of "value|owner" to expiry (ms, server clock).
func NewUseKeyspace(prefix, name string) Keyspace {
	tag := prefix + "{" + tagEscaper.Replace(name)
	keys := []string{tag + stateSuffix, tag + fleetSuffix, tag + useSuffix}
	return Keyspace{Keys: keys, Args: []any{keys[0], keys[1], keys[2]}}
}

// LimitValue is a Semaphore's limit as a use record holds it.
func LimitValue(n int64) string { return "s" + strconv.FormatInt(n, 10) }

// RateValue is a rate as a use record holds it.
func RateValue(r Rate) string {
	return "r" + strconv.FormatInt(r.Events, 10) + "/" + strconv.FormatInt(r.Per.Nanoseconds(), 10) + "/" + strconv.FormatInt(r.Burst, 10)
}

// ParseUseValue undoes LimitValue (isRate false) and RateValue; ok is
// false for anything else, such as a later version's value.
func ParseUseValue(v string) (limit int64, r Rate, isRate, ok bool) {
	if rest, found := strings.CutPrefix(v, "s"); found {
		n, err := strconv.ParseInt(rest, 10, 64)
		return n, Rate{}, false, err == nil && n > 0
	}
	rest, found := strings.CutPrefix(v, "r")
	f := strings.Split(rest, "/")
	if !found || len(f) != 3 {
		return 0, Rate{}, false, false
	}
	var n [3]int64
	for i := range f {
		var err error
		if n[i], err = strconv.ParseInt(f[i], 10, 64); err != nil || n[i] <= 0 {
			return 0, Rate{}, false, false
		}
	}
	return 0, Rate{Events: n[0], Per: time.Duration(n[1]), Burst: n[2]}, true, true
}
