package limiter

import "strings"

// keyspace names every key of one semaphore. They all share one hash tag
// so each script touches a single Cluster slot.
type keyspace struct {
	keys []string // leases (ZSET), state (HASH), queue (ZSET): the KEYS of every script
	// args are the keys boxed once, as the hot scripts send them (a
	// string put in an interface allocates).
	args []any
	// limit is the asking semaphore's: a quorum's size depends on it.
	limit int64
}

// tagEscaper makes any name safe inside a hash tag: a '}' would end the tag
// early, and escaping '%' keeps the mapping one-to-one (tagUnescaper
// undoes it).
var (
	tagEscaper   = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
	tagUnescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")
)

// stateSuffix ends the state key, which every used semaphore has.
const stateSuffix = "}:state"

func newKeyspace(prefix, name string, limit int64) keyspace {
	tag := prefix + "{" + tagEscaper.Replace(name)
	keys := []string{tag + "}:leases", tag + stateSuffix, tag + "}:queue"}
	return keyspace{keys: keys, args: []any{keys[0], keys[1], keys[2]}, limit: limit}
}

// statePattern is the SCAN pattern of the state keys under prefix, of
// every name: the prefix is escaped so that its glob characters match
// only themselves, and no caller's glob goes in, since Redis would match
// it against the escaped name and the suffix after it (Names filters the
// names instead).
func statePattern(prefix string) string {
	return globEscape(prefix) + "{*" + stateSuffix
}

// nameOfStateKey undoes newKeyspace for a state key. SCAN also brings
// keys that only look like one, such as another program's "p{a}b}:state"
// or "p{}:state": a key is taken only if it is the state key of the name
// it gives, so Names lists no name that a key merely resembles.
func nameOfStateKey(key string) (string, bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 || !strings.HasSuffix(key, stateSuffix) || len(key)-len(stateSuffix) <= open+1 {
		return "", false
	}
	escaped := key[open+1 : len(key)-len(stateSuffix)]
	name := tagUnescaper.Replace(escaped)
	if tagEscaper.Replace(name) != escaped {
		return "", false
	}
	return name, true
}

// id is what the keyspace is known by in maps: its first key.
func (k keyspace) id() string { return k.keys[0] }
