package limiter

import "context"

// Mutex is a lock shared by every process that uses the same Redis and
// name: a Semaphore of one permit, made by Client.Mutex, with the same
// leases, fencing tokens, handover, queue and waiting. Each method is the
// Semaphore method of the same name (a Weight other than 1 gives an
// *ArgumentError); see there for what it does on cancellation, loss and
// error. A Mutex is a cheap value, safe for concurrent use.
type Mutex struct {
	s *Semaphore
}

// Name returns the mutex's name.
func (m *Mutex) Name() string { return m.s.name }

// TryAcquire takes the lock if it is free now and nobody waits for it,
// and never waits (Semaphore.TryAcquire).
func (m *Mutex) TryAcquire(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	return m.s.TryAcquire(ctx, opts...)
}

// Acquire waits until the lock is free and it is this request's turn, and
// takes it (Semaphore.Acquire).
func (m *Mutex) Acquire(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	return m.s.Acquire(ctx, opts...)
}

// Do acquires the lock, runs fn under it and releases it (Semaphore.Do).
func (m *Mutex) Do(ctx context.Context, fn func(ctx context.Context) error, opts ...AcquireOption) error {
	return m.s.Do(ctx, fn, opts...)
}

// Resume takes over the lock a ticket names (Semaphore.Resume).
func (m *Mutex) Resume(ctx context.Context, t Ticket) (*Lease, error) { return m.s.Resume(ctx, t) }

// ReleaseTicket releases the lock a ticket names, from any process (the
// cron side of a handover whose task could not be enqueued)
// (Semaphore.ReleaseTicket).
func (m *Mutex) ReleaseTicket(ctx context.Context, t Ticket) error { return m.s.ReleaseTicket(ctx, t) }
