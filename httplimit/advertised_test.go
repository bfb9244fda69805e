package httplimit

import (
	"net/http"
	"testing"
	"time"
)

// Real headers, from GitHub's REST API docs and the IETF draft's
// examples (draft-ietf-httpapi-ratelimit-headers -03, -07, -08), and bad
// ones: a value that does not parse is ignored, never a panic.
func TestParseAdvertised(t *testing.T) {
	now := time.Unix(1372700800, 0)
	const none = -1
	for _, tc := range []struct {
		name string
		h    map[string]string
		want advertised
	}{
		{"github", map[string]string{"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "56",
			"X-RateLimit-Used": "4", "X-RateLimit-Reset": "1372700873", "X-RateLimit-Resource": "core"},
			advertised{limit: 60, remaining: 56, reset: 73 * time.Second}},
		{"github spent", map[string]string{"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "0",
			"X-RateLimit-Reset": "1372700873"},
			advertised{limit: 5000, remaining: 0, reset: 73 * time.Second}},
		{"github reset past", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1372700000"},
			advertised{remaining: 0}},
		{"draft-03", map[string]string{"RateLimit-Limit": "10", "RateLimit-Remaining": "0", "RateLimit-Reset": "7"},
			advertised{limit: 10, remaining: 0, reset: 7 * time.Second}},
		{"draft-03 policies in Limit", map[string]string{"RateLimit-Limit": "10, 10;w=1, 50;w=60",
			"RateLimit-Remaining": "9", "RateLimit-Reset": "1"},
			advertised{limit: 50, window: time.Minute, remaining: 9, reset: time.Second}},
		{"draft-05 policy", map[string]string{"RateLimit-Limit": "100", "RateLimit-Remaining": "50",
			"RateLimit-Reset": "50", "RateLimit-Policy": "100;w=60"},
			advertised{limit: 100, window: time.Minute, remaining: 50, reset: 50 * time.Second}},
		{"draft-07 combined", map[string]string{"RateLimit": "limit=100, remaining=50, reset=50",
			"RateLimit-Policy": "100;w=60"},
			advertised{limit: 100, window: time.Minute, remaining: 50, reset: 50 * time.Second}},
		{"draft-08", map[string]string{"RateLimit-Policy": `"default";q=100;w=10`, "RateLimit": `"default";r=50;t=30`},
			advertised{limit: 100, window: 10 * time.Second, remaining: 50, reset: 30 * time.Second}},
		{"draft-08 two policies", map[string]string{"RateLimit-Policy": `"burst";q=100;w=60,"daily";q=1000;w=86400`,
			"RateLimit": `"burst";r=0;t=12, "daily";r=900;t=3600`},
			advertised{limit: 1000, window: 24 * time.Hour, remaining: 0, reset: 12 * time.Second}},
		{"fractional reset", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "0.25"},
			advertised{remaining: 0, reset: 250 * time.Millisecond}},
		{"empty", map[string]string{}, advertised{remaining: none}},
		{"garbage", map[string]string{"RateLimit-Limit": "abc", "RateLimit-Remaining": "-5", "RateLimit-Reset": "NaN",
			"RateLimit-Policy": ";;;,=,=;w=", "RateLimit": "=, ;r=;t=, limit=, remaining=x"},
			advertised{remaining: none}},
		{"out of range", map[string]string{"X-RateLimit-Limit": "99999999999999999999", "X-RateLimit-Remaining": "1e3",
			"X-RateLimit-Reset": "1e400", "RateLimit-Policy": "0;w=1, 10;w=-1, 10;w=Inf, 10;w=1e300"},
			advertised{remaining: none}},
		{"huge epoch", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1e300"},
			advertised{remaining: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.h {
				h.Set(k, v)
			}
			if got := parseAdvertised(h, now); got != tc.want {
				t.Errorf("parseAdvertised(%v) = %+v, want %+v", tc.h, got, tc.want)
			}
		})
	}
}

// No header value panics the parser.
func FuzzParseAdvertised(f *testing.F) {
	f.Add("10, 10;w=1", `"p";r=0;t=1`, `"p";q=1;w=1`, "1372700873")
	f.Fuzz(func(t *testing.T, limit, rl, policy, reset string) {
		h := http.Header{"Ratelimit-Limit": {limit}, "Ratelimit": {rl}, "Ratelimit-Policy": {policy},
			"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {reset}}
		a := parseAdvertised(h, time.Now())
		if a.limit < 0 || a.window < 0 || a.reset < 0 || a.remaining < -1 {
			t.Errorf("parseAdvertised = %+v: a negative value", a)
		}
	})
}
