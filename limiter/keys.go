package limiter

import "strings"

// keyspace names every key of one semaphore. They all share one hash tag
// so each script touches a single Cluster slot.
type keyspace struct {
	keys []string // leases (ZSET), state (HASH), queue (ZSET): the KEYS of every script
	// limit is the asking semaphore's: a quorum's size depends on it.
	limit int64
}

// tagEscaper makes any name safe inside a hash tag: a '}' would end the tag
// early, and escaping '%' keeps the mapping one-to-one.
var (
	tagEscaper   = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
	tagUnescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")
)

// statePattern is the SCAN pattern of the state keys of the names that
// match the glob match.
func statePattern(prefix, match string) string {
	if match == "" {
		match = "*"
	}
	return prefix + "{" + tagEscaper.Replace(match) + stateSuffix
}

func newKeyspace(prefix, name string, limit int64) keyspace {
	base := prefix + "{" + tagEscaper.Replace(name) + "}"
	return keyspace{keys: []string{base + ":leases", base + ":state", base + ":queue"}, limit: limit}
}

// id is what the keyspace is known by in maps: its first key.
func (k keyspace) id() string { return k.keys[0] }
