package redistest

import (
	"context"
	"testing"
	"time"
)

// The raw-RESP helpers must dial TLS-only servers with the server's
// config: readiness after Restart and the stats depend on it.
func TestTLSServerHelpers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := StartTLSServer(t)
	if _, err := command(s.Addr(), nil, 200*time.Millisecond, "PING"); err == nil {
		t.Fatal("plain-text PING succeeded on a TLS-only server")
	}
	c := s.Client(t)
	if err := c.Ping(ctx).Err(); err != nil { // connect first: handshake not counted below
		t.Fatal(err)
	}
	before := s.CommandCalls(t)
	for i := 0; i < 3; i++ {
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if d := s.CommandCalls(t)["ping"] - before["ping"]; d != 3 {
		t.Fatalf("ping calls grew by %d, want 3", d)
	}
	s.ResetStats(t)
	if n := s.CommandCalls(t)["ping"]; n != 0 {
		t.Fatalf("ping calls after ResetStats = %d", n)
	}

	s.Restart(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}
