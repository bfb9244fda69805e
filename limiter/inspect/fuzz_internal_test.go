package inspect

import (
	"slices"
	"strings"
	"testing"

	"github.com/redsem/redsem/internal/glob"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/internal/store"
)

// FuzzStatePattern checks how Client.Names finds names, SCAN MATCH being
// Redis's matcher (globMatch, checked against redis-server): the pattern
// matches the state key of every name under the prefix, no leases or
// queue key, and no state key under another prefix, whatever glob
// characters either prefix holds; a key it matches that nameOfStateKey
// takes is exactly the state key of the name it gives, so keys that only
// look like one (raw names between braces) list nothing; and the glob
// then keeps a name exactly when it matches the name itself, as Names
// promises ("" matching all).
func FuzzStatePattern(f *testing.F) {
	for _, seed := range [][4]string{
		{limiter.DefaultPrefix, "api-a", "app:", "api-*"},
		{limiter.DefaultPrefix, "api-{b}", "", "api-*"},
		{limiter.DefaultPrefix, "other%", "x", ""},
		{"", "n", "p", "n"},
		{limiter.DefaultPrefix, "{", "redsem", "*{*"},
		{limiter.DefaultPrefix, "}", "redsem::", "*}"},
		{limiter.DefaultPrefix, "%", limiter.DefaultPrefix, "%"},
		{limiter.DefaultPrefix, "a%b", "", "a%*"},
		{limiter.DefaultPrefix, "n", "", "[mn]"},
		{limiter.DefaultPrefix, "n", "", "[^n]"},
		{limiter.DefaultPrefix, "été", "", "?t?"},
		{limiter.DefaultPrefix, "*", "", "\\*"},
		{"p:", "n", "q:", "*"},
		{"svc[eu]:", "n", "svce:", ""},
		{"svce:", "n", "svc[eu]:", ""},
		{"app*", "n", "app2:", ""},
		{`p\`, "n", "p", ""},
		{"p", "n", `p\`, ""},
		{"q?", "n", "qq", "?"},
		{limiter.DefaultPrefix, "x%", "", "*5"},
		{limiter.DefaultPrefix, "{", "", "?"},
		{limiter.DefaultPrefix, "{", "", "[{]"},
		{limiter.DefaultPrefix, "{", "", "?7B"},
		{limiter.DefaultPrefix, "n", "", `n\`},
		{limiter.DefaultPrefix, "n", "", "[n"},
		{limiter.DefaultPrefix, "%7B", "%257B", "%7B"},
		{limiter.DefaultPrefix, "a}b", limiter.DefaultPrefix + "{a}b}:state", "a*"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	f.Fuzz(func(t *testing.T, prefix, name, otherPrefix, match string) {
		if name == "" || strings.ContainsAny(prefix, "{}") {
			return // FuzzKeyspace proves these are rejected
		}
		own := store.NewKeyspace(prefix, name, 1).Keys
		pattern := store.StatePattern(prefix)
		if !glob.Match(pattern, own[1]) {
			t.Fatalf("pattern %q misses the state key %q of %q under prefix %q", pattern, own[1], name, prefix)
		}
		for _, k := range []string{own[0], own[2]} {
			if glob.Match(pattern, k) {
				t.Fatalf("pattern %q matches %q, which is no state key", pattern, k)
			}
		}
		var others []string
		if otherPrefix != prefix && !strings.ContainsAny(otherPrefix, "{}") {
			k := store.NewKeyspace(otherPrefix, name, 1).Keys[1]
			if glob.Match(pattern, k) {
				t.Fatalf("pattern %q of prefix %q matches %q of prefix %q", pattern, prefix, k, otherPrefix)
			}
			others = append(others, k)
		}

		// What SCAN brings back: the own keys, another prefix's, and keys
		// that are not redsem's but may look like them.
		scanned := append(slices.Clone(own), others...)
		scanned = append(scanned, prefix+"{"+name+"}:state", prefix+"{"+otherPrefix+"}:state",
			prefix+otherPrefix, otherPrefix)
		var found []string
		for _, k := range scanned {
			if !glob.Match(pattern, k) {
				continue
			}
			n, ok := store.NameOfStateKey(k)
			if !ok {
				if k == own[1] {
					t.Fatalf("store.NameOfStateKey(%q) does not take the state key of %q", k, name)
				}
				continue
			}
			if want := store.NewKeyspace(prefix, n, 1).Keys[1]; k != want {
				t.Fatalf("key %q, matched by %q, taken for %q, whose state key is %q", k, pattern, n, want)
			}
			if !slices.Contains(found, n) {
				found = append(found, n)
			}
		}
		if !slices.Contains(found, name) {
			t.Fatalf("Names of prefix %q would not find %q among %q", prefix, name, scanned)
		}

		sel := match
		if sel == "" {
			sel = "*"
		}
		listed := matchingNames(slices.Clone(found), match)
		if want := glob.Match(sel, name); slices.Contains(listed, name) != want {
			t.Fatalf("glob %q matches name %q: %v, but Names(%q) gives %q of %q", sel, name, want, match, listed, found)
		}
		for _, n := range listed {
			if !glob.Match(sel, n) {
				t.Fatalf("Names(%q) lists %q, which the glob does not match", match, n)
			}
		}
	})
}
