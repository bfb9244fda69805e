package glob

import "testing"

// The cases are redis-cli's answers (KEYS on a server holding the key).
func TestMatchAsRedis(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "a/b", true}, // path.Match stops at '/'; Redis does not
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"[abc]x", "bx", true},
		{"[^abc]x", "bx", false},
		{"[^abc]x", "dx", true},
		{"[a-c]", "b", true},
		{"[c-a]", "b", true}, // a reversed range is swapped
		{`\*`, "*", true},
		{`\*`, "a", false},
		{"[abc", "a", true}, // an unterminated class ends at the pattern's end
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"", "", true},
		{"", "a", false},
	} {
		if got := Match(c.pattern, c.s); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

// An escaped string matches itself alone: a prefix is text, not a glob.
func TestEscapeMatchesItselfAlone(t *testing.T) {
	for _, s := range []string{"app", "app*", `a\b`, "[x]", "?"} {
		e := Escape(s)
		if !Match(e, s) {
			t.Errorf("Match(Escape(%q) = %q, %q) = false", s, e, s)
		}
		if Match(e, s+"2") || (s != "" && Match(e, "x"+s[1:])) {
			t.Errorf("Escape(%q) = %q matches more than itself", s, e)
		}
	}
}
