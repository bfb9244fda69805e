package redisstore

import (
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// SetLinger shortens how long w keeps a channel after its last Drop.
func SetLinger(w store.ShardWakes, d time.Duration) { w.(*shardWakes).linger = d }
