package redistest

import (
	"testing"
	"time"
)

// Eventually polls cond every few milliseconds and fails the test if it is
// not true within the given time. It waits for background effects (a
// lease expiring, a worker finishing); it is not for timing claims, which
// belong in benchmarks.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
