package limiter

import "strings"

// keyspace names every key and the wake channel of one semaphore. They all
// share one hash tag so each script touches a single Cluster slot.
type keyspace struct {
	keys    []string // leases (ZSET) and state (HASH): the KEYS of every script
	channel string
}

// tagEscaper makes any name safe inside a hash tag: a '}' would end the tag
// early, and escaping '%' keeps the mapping one-to-one.
var tagEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

func newKeyspace(prefix, name string) keyspace {
	base := prefix + "{" + tagEscaper.Replace(name) + "}"
	return keyspace{
		keys:    []string{base + ":leases", base + ":state"},
		channel: base + ":wake",
	}
}
