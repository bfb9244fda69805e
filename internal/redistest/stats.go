package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// statsTimeout bounds INFO/CONFIG calls; a paused server fails instead of
// hanging the test.
const statsTimeout = 5 * time.Second

// CommandCalls returns how many times each command ran on the server, from
// INFO commandstats, keyed by lowercase name as Redis prints it ("evalsha",
// "ping", "cluster|info"). Tests use it to assert round trips, e.g. that a
// script ran via EVALSHA rather than EVAL.
//
// Stats are reset once the server is up, so startup probes are not counted.
// The helper's own queries are: each CommandCalls adds one "info" and each
// ResetStats leaves "config|resetstat" at 1. Compare differences or
// commands the helpers never send.
func (s *Server) CommandCalls(t testing.TB) map[string]int64 {
	t.Helper()
	info, err := s.command(statsTimeout, "INFO", "commandstats")
	if err != nil {
		t.Fatalf("redistest: %s: INFO commandstats: %v", s.Addr(), err)
	}
	calls, err := parseCommandStats(info)
	if err != nil {
		t.Fatalf("redistest: %s: %v", s.Addr(), err)
	}
	return calls
}

// Scripts sums the script calls in calls (from CommandCalls): EVAL,
// EVALSHA and FCALL, however the library sent them.
func Scripts(calls map[string]int64) int64 {
	return calls["eval"] + calls["evalsha"] + calls["fcall"]
}

// Publishes sums the wake-ups in calls (from CommandCalls): PUBLISH, and
// SPUBLISH (a Cluster's shard channels).
func Publishes(calls map[string]int64) int64 {
	return calls["publish"] + calls["spublish"]
}

// ResetStats clears the server's statistics (CONFIG RESETSTAT) so a test
// can count calls from a known zero point.
func (s *Server) ResetStats(t testing.TB) {
	t.Helper()
	s.resetStats(t)
}

func (s *Server) resetStats(t testing.TB) {
	t.Helper()
	if _, err := s.command(statsTimeout, "CONFIG", "RESETSTAT"); err != nil {
		t.Fatalf("redistest: %s: CONFIG RESETSTAT: %v", s.Addr(), err)
	}
}

// parseCommandStats parses lines such as
//
//	cmdstat_ping:calls=3,usec=2,usec_per_call=0.67,rejected_calls=0,failed_calls=0
func parseCommandStats(info string) (map[string]int64, error) {
	calls := make(map[string]int64)
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("malformed commandstats line %q", line)
		}
		found := false
		for _, f := range strings.Split(fields, ",") {
			v, ok := strings.CutPrefix(f, "calls=")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("malformed calls in %q: %v", line, err)
			}
			calls[strings.ToLower(name)] = n
			found = true
		}
		if !found {
			return nil, fmt.Errorf("no calls= in commandstats line %q", line)
		}
	}
	return calls, nil
}
