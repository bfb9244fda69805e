package limiter

import "github.com/redis/go-redis/v9"

// Mutex is a Semaphore of one permit: the same leases, fencing tokens,
// handoff and waiting. Acquire, TryAcquire, Resume and Do behave exactly
// as the Semaphore methods they are.
type Mutex struct {
	*Semaphore
}

// NewMutex returns a mutex named name on rdb (plain, Sentinel or Cluster
// client). Invalid arguments give an *ArgumentError naming them.
func NewMutex(rdb redis.UniversalClient, name string, opts ...Option) (*Mutex, error) {
	s, err := NewSemaphore(rdb, name, 1, opts...)
	if err != nil {
		return nil, err
	}
	return &Mutex{s}, nil
}
