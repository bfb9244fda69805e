package redistest

import (
	"testing"
	"time"
)

// KillMaster kills the master of a key's slot and returns its replica,
// promoted, which then serves the key.
func TestClusterKillMaster(t *testing.T) {
	c := StartClusterWithReplicas(t, 3)
	if n := len(c.Servers()); n != 6 {
		t.Fatalf("%d servers, want 3 masters and 3 replicas", n)
	}
	const key = "{job}"
	master, _, err := c.masterAndReplica(keySlot(key))
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	promoted, at := c.KillMaster(t, key)
	if promoted == master {
		t.Fatal("KillMaster returned the killed master")
	}
	t.Logf("promoted %v after the kill", at.Sub(killed).Round(time.Millisecond))
	cc := c.Client(t)
	Eventually(t, 5*time.Second, "the promoted replica serves the key", func() bool {
		cc.ReloadState(t.Context())
		return cc.Set(t.Context(), key, "v", 0).Err() == nil
	})
}
