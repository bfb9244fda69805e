package limiter

import (
	"testing"
	"time"
)

// The quorum is the smallest for which limit+1 leases cannot fit in the
// node slots (N·limit), so majority for a mutex and more above.
func TestQuorumSize(t *testing.T) {
	for n := 1; n <= 9; n++ {
		for limit := int64(1); limit <= 8; limit++ {
			q := quorumSize(n, limit)
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
		if got, want := quorumSize(n, 1), n/2+1; got != want {
			t.Fatalf("mutex on %d nodes: quorum %d, want the majority %d", n, got, want)
		}
	}
}

// The default NodeTimeout leaves a short-TTL quorum room for a node a few
// milliseconds slow (a tenth of a 50ms TTL failed one 6ms slow), and no
// more than half a second for long TTLs.
func TestDefaultNodeTimeout(t *testing.T) {
	for _, c := range []struct{ ttl, atLeast, atMost time.Duration }{
		{50 * time.Millisecond, 15 * time.Millisecond, 20 * time.Millisecond},
		{time.Second, 300 * time.Millisecond, 400 * time.Millisecond},
		{time.Minute, 500 * time.Millisecond, 500 * time.Millisecond},
	} {
		cfg := defaultConfig()
		cfg.ttl = c.ttl
		if w := cfg.nodeWait(); w < c.atLeast || w > c.atMost {
			t.Errorf("TTL %v: default NodeTimeout %v, want %v..%v", c.ttl, w, c.atLeast, c.atMost)
		}
	}
}
