package limiter

import "github.com/redsem/redsem/limiter/internal/store"

// GlobMatch reports whether the glob match selects name as
// Inspector.Names and Inspector.RateNames select names: a glob in Redis's
// syntax matched against the name itself ("" selects every name). It
// lets a caller that already holds the names filter them without asking
// Redis again.
func GlobMatch(match, name string) bool {
	return match == "" || store.GlobMatch(match, name)
}
