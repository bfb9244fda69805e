// Package glob matches names as Redis's SCAN MATCH matches keys, for the
// packages that filter names they already hold (limiter's Inspector, the
// dashboard) without asking Redis again.
package glob

import "strings"

// limiter's Names takes a glob in Redis's syntax but applies it to names,
// which are not the keys Redis sees: the name is escaped inside the key,
// between the prefix and a suffix. So the glob is matched here, on the
// name itself, by a copy of Redis's matcher, and SCAN is only given a
// pattern with nothing of the caller's in it but the (escaped) prefix.

// Match reports whether pattern selects s. It is Redis's stringmatchlen (util.c), case-sensitive, the
// matcher of SCAN MATCH and KEYS: path.Match differs on '/', escapes and
// unterminated classes, and an operator's glob must select what it would
// select in redis-cli. Ranges compare bytes as signed, as C's char is on
// x86-64, the usual server: checked against redis-server 7.0 there.
func Match(pattern, s string) bool {
	skipLonger := false
	return globMatchFrom(pattern, s, &skipLonger, 0)
}

// skipLonger and nesting are Redis's guards against patterns that would
// take exponential time; keeping them keeps its answers for such
// patterns too.
func globMatchFrom(p, s string, skipLonger *bool, nesting int) bool {
	if nesting > 1000 {
		return false
	}
	for len(p) > 0 && len(s) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 1 && p[1] == '*' {
				p = p[1:]
			}
			if len(p) == 1 {
				return true
			}
			for len(s) > 0 {
				if globMatchFrom(p[1:], s, skipLonger, nesting+1) {
					return true
				}
				if *skipLonger {
					return false
				}
				s = s[1:]
			}
			*skipLonger = true
			return false
		case '?':
			s = s[1:]
			p = p[1:]
		case '[':
			p = p[1:]
			not := len(p) > 0 && p[0] == '^'
			if not {
				p = p[1:]
			}
			match := false
			for {
				if len(p) >= 2 && p[0] == '\\' {
					p = p[1:]
					if p[0] == s[0] {
						match = true
					}
				} else if len(p) == 0 {
					break // an unterminated class ends the pattern
				} else if p[0] == ']' {
					p = p[1:]
					break
				} else if len(p) >= 3 && p[1] == '-' {
					lo, hi, c := int8(p[0]), int8(p[2]), int8(s[0])
					if lo > hi {
						lo, hi = hi, lo
					}
					if c >= lo && c <= hi {
						match = true
					}
					p = p[2:]
				} else if p[0] == s[0] {
					match = true
				}
				p = p[1:]
			}
			if match == not {
				return false
			}
			s = s[1:]
		case '\\':
			if len(p) >= 2 {
				p = p[1:]
			}
			fallthrough
		default:
			if p[0] != s[0] {
				return false
			}
			s = s[1:]
			p = p[1:]
		}
		if len(s) == 0 {
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			break
		}
	}
	return len(p) == 0 && len(s) == 0
}

// special are the bytes a glob gives a meaning to. '^' and '-' need
// no escape: they mean something only inside a class, and every '[' is
// escaped.
const special = `*?[]\`

// Escape makes s a glob that matches s alone: a prefix is the
// operator's text, not a pattern, and "app*" must not list "app2:".
func Escape(s string) string {
	if !strings.ContainsAny(s, special) {
		return s
	}
	var b strings.Builder
	b.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(special, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
