package quorum

import "testing"

// The quorum is the smallest for which limit+1 leases cannot fit in the
// node slots (N·limit), so majority for a mutex and more above.
func TestQuorumSize(t *testing.T) {
	for n := 1; n <= 9; n++ {
		for limit := int64(1); limit <= 8; limit++ {
			q := Size(n, limit)
			if q > n {
				t.Fatalf("N=%d limit=%d: quorum %d above N", n, limit, q)
			}
			if int64(q)*(limit+1) <= int64(n)*limit {
				t.Fatalf("N=%d limit=%d: quorum %d lets limit+1 holders fit", n, limit, q)
			}
			if int64(q-1)*(limit+1) > int64(n)*limit {
				t.Fatalf("N=%d limit=%d: quorum %d is not the smallest safe one", n, limit, q)
			}
		}
		if got, want := Size(n, 1), n/2+1; got != want {
			t.Fatalf("mutex on %d nodes: quorum %d, want the majority %d", n, got, want)
		}
	}
}
