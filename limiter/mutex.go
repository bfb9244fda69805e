package limiter

// Mutex is a Semaphore of one permit, made by Client.Mutex: the same
// leases, fencing tokens, handoff, queue and waiting. Acquire, TryAcquire,
// Resume and Do behave exactly as the Semaphore methods they are.
type Mutex struct {
	*Semaphore
}
