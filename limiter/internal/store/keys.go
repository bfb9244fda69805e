package store

import (
	"strings"

	"github.com/redsem/redsem/internal/glob"
)

// Keyspace names every key of one semaphore (NewKeyspace) or one rate
// (NewRateKeyspace). They all share one hash tag, the name's, so each
// script touches a single Cluster slot.
type Keyspace struct {
	// Keys are the KEYS of every script: a semaphore's leases (ZSET),
	// state (HASH), queue (ZSET) and pause (STRING); a rate's state
	// (HASH) and pause, the same key as its semaphore's.
	Keys []string
	// Args are the keys boxed once, as the hot scripts send them (a
	// string put in an interface allocates).
	Args []any
	// Limit is the asking semaphore's: a quorum's size depends on it.
	Limit int64
}

// tagEscaper makes any name safe inside a hash tag: a '}' would end the tag
// early, and escaping '%' keeps the mapping one-to-one (tagUnescaper
// undoes it).
var (
	tagEscaper   = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
	tagUnescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")
)

// stateSuffix ends the state key, which every used semaphore has.
// MaxLimit bounds a limit, a weight and a rate's events: it keeps permit
// sums exact in Lua, whose numbers are doubles.
const MaxLimit = 1 << 40

// HeldByFleet says whether a fleet limit (set or learned), below a
// Semaphore's own limit, is what keeps out a request of weight with taken
// permits held or asked for ahead of it: it does not fit under fleet and
// would under own. BusyError.Reason and Inspector.Why both judge by it.
func HeldByFleet(fleet, own, taken, weight int64) bool {
	return fleet > 0 && fleet < own && taken+weight > fleet && taken+weight <= own
}

const stateSuffix = "}:state"

// NewKeyspace returns the keys of the semaphore name under prefix.
func NewKeyspace(prefix, name string, limit int64) Keyspace {
	tag := prefix + "{" + tagEscaper.Replace(name)
	keys := []string{tag + "}:leases", tag + stateSuffix, tag + "}:queue", tag + pauseSuffix}
	return Keyspace{Keys: keys, Args: []any{keys[0], keys[1], keys[2], keys[3]}, Limit: limit}
}

// WakeChannel is the shard channel on which releases of this semaphore
// wake the waiters of the Client owner. It carries the name's hash tag:
// Redis checks a shard channel's slot as a key's, so a script on the
// name's keys may SPUBLISH it, and the message stays in the name's shard.
// The owner is its last part (common.lua's owner_of), as in the Client's
// plain channel, which has no '{' (a prefix may not): the scripts tell the
// two apart by that.
func (k Keyspace) WakeChannel(owner string) string {
	tag := k.Keys[0][:strings.IndexByte(k.Keys[0], '}')+1]
	return tag + ":wake:" + owner
}

// StatePattern is the SCAN pattern of the state keys under prefix, of
// every name: the prefix is escaped so that its glob characters match
// only themselves, and no caller's glob goes in, since Redis would match
// it against the escaped name and the suffix after it (limiter filters the
// names instead, with glob.Match).
func StatePattern(prefix string) string {
	return glob.Escape(prefix) + "{*" + stateSuffix
}

// NameOfStateKey undoes NewKeyspace for a state key. SCAN also brings
// keys that only look like one, such as another program's "p{a}b}:state"
// or "p{}:state": a key is taken only if it is the state key of the name
// it gives, so Names lists no name that a key merely resembles.
func NameOfStateKey(key string) (string, bool) { return nameOf(key, stateSuffix) }

func nameOf(key, suffix string) (string, bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 || !strings.HasSuffix(key, suffix) || len(key)-len(suffix) <= open+1 {
		return "", false
	}
	escaped := key[open+1 : len(key)-len(suffix)]
	name := tagUnescaper.Replace(escaped)
	if tagEscaper.Replace(name) != escaped {
		return "", false
	}
	return name, true
}

// ID is what the keyspace is known by in maps: its first key.
func (k Keyspace) ID() string { return k.Keys[0] }
