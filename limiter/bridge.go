package limiter

import (
	"github.com/redsem/redsem/limiter/internal/bridge"
	"github.com/redsem/redsem/limiter/internal/store"
)

// The inspect package reads a Client's parts through bridge.
func init() {
	bridge.Of = func(v any) bridge.Client {
		c := v.(*Client)
		return bridge.Client{
			Store: c.st, ID: c.id, Prefix: c.cfg.prefix, TTL: c.cfg.ttl, Quarantine: c.cfg.quarantine,
			Channel: c.hub.channel, Wake: c.hub.wake, Paused: c.cfg.observer.Paused, Closed: c.closedErr,
		}
	}
	bridge.ArgError = argError
	bridge.RedisError = redisError
	bridge.CheckRate = func(r store.Rate, arg string) error { return Rate(r).check(arg) }
}
