package torture

import (
	"strings"
	"testing"
)

// The checker must be able to fail: hand-made logs with each kind of
// fault it exists to catch.
func TestCheckerFindsFaults(t *testing.T) {
	parse := func(t *testing.T, lines ...string) []record {
		t.Helper()
		var recs []record
		for _, l := range lines {
			r, err := parseRecord(l)
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r)
		}
		return recs
	}
	// G proc lease weight token attempt hold seq time
	for _, c := range []struct {
		name string
		log  []string
		want func(v verdict) bool
	}{
		{"clean", []string{
			"G 0 a 2 100 1 10 2 0", "G 1 b 1 101 3 10 4 0", "R 0 a 5 0", "G 1 c 2 102 6 10 7 0", "L 1 b 8 0", "R 1 c 9 0",
		}, func(v verdict) bool { return v.ok() && v.acquisitions == 3 && v.lost == 1 && v.peak == 3 }},
		{"over the limit", []string{
			"G 0 a 2 100 1 10 2 0", "G 1 b 2 101 3 10 4 0", "R 0 a 5 0", "R 1 b 6 0",
		}, func(v verdict) bool { return v.violations == 1 && v.worst == 1 && v.backward == 0 }},
		// b was released (R at 4) before c was granted: no overlap, but a
		// holder told of loss (L) after a grant still counts until then.
		{"loss notice after the next grant", []string{
			"G 0 a 3 100 1 10 2 0", "G 1 b 1 101 3 10 4 0", "L 0 a 5 0", "R 1 b 6 0",
		}, func(v verdict) bool { return v.violations == 1 && v.lost == 1 }},
		{"token backward", []string{
			"G 0 a 1 200 1 10 2 0", "R 0 a 3 0", "G 1 b 1 150 4 10 5 0", "R 1 b 6 0",
		}, func(v verdict) bool { return v.backward == 1 && v.violations == 0 }},
		// b's request was sent (attempt 1) before a was granted: either
		// order of tokens is fine.
		{"concurrent requests in any order", []string{
			"G 0 a 1 200 2 10 3 0", "G 1 b 1 150 1 10 4 0", "R 0 a 5 0", "R 1 b 6 0",
		}, func(v verdict) bool { return v.ok() }},
		{"token twice", []string{
			"G 0 a 1 100 1 10 2 0", "G 1 b 1 100 1 10 3 0", "R 0 a 4 0", "R 1 b 5 0",
		}, func(v verdict) bool { return v.duplicate == 1 }},
		// A killed process holds nothing after its kill record, and what
		// it wrote before dying but the observer logged after is ignored.
		{"killed holder", []string{
			"G 0 a 3 100 1 10 2 0", "K 0 3 0", "G 1 b 3 101 4 10 5 0", "G 0 c 3 102 1 10 6 0", "R 1 b 7 0",
		}, func(v verdict) bool { return v.ok() && v.killed == 1 && v.acquisitions == 2 }},
		{"never ended", []string{"G 0 a 1 100 1 10 2 0"}, func(v verdict) bool { return v.malformed == 1 }},
		{"end of a lease never granted", []string{"R 0 x 2 0"}, func(v verdict) bool { return v.malformed == 1 }},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			if v := check(parse(t, c.log...), 3); !c.want(v) {
				t.Fatalf("verdict: %+v", v)
			}
		})
	}
	if _, err := parseRecord("G 0 a 1"); err == nil {
		t.Fatal("a short record parsed")
	}
}
