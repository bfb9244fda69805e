package limiter

import (
	"sync"
	"time"
)

// quarantineNotice logs, once per restart quarantine, that a server that
// just started grants nothing new for a while: users meet it on every
// fresh Redis (an integration test's, a new deployment's), and an Acquire
// that waits it out would otherwise wait without a word.
type quarantineNotice struct {
	mu    sync.Mutex
	until time.Time // the end of the last quarantine logged
}

// quarantined notes a refusal by the restart quarantine, which ends in
// left. A quarantine that ends within a second of the one logged last is
// the same: a server's names end theirs within the second after its start
// plus the quarantine (the start is known to the second, each name's
// first sight closer).
func (c *Client) quarantined(left time.Duration) {
	n := &c.quarantine
	end := time.Now().Add(left)
	n.mu.Lock()
	seen := end.Sub(n.until) < time.Second
	if !seen {
		n.until = end
	}
	n.mu.Unlock()
	if seen {
		return
	}
	// It may have forgotten leases still in use; a server nobody used
	// before can skip this with RestartQuarantine(0).
	c.cfg.logger.Info("redsem: restart quarantine: no new grants on names without state",
		"resume", end.Round(time.Millisecond), "in", left)
}
