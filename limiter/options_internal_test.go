package limiter

import (
	"testing"
	"time"
)

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
