package limiter

import (
	"context"
	"errors"
	"fmt"
)

type leaseCtxKey struct{}

// LeaseFrom returns the lease that the work running under ctx holds: in
// Do's fn, in Run's fn and in the handlers of asynqmw and
// scheduler; ok is false anywhere else. The lease may have been lost
// meanwhile (its Err says; ctx is then cancelled). Use its Token to fence
// writes.
func LeaseFrom(ctx context.Context) (*Lease, bool) {
	l, ok := ctx.Value(leaseCtxKey{}).(*Lease)
	return l, ok
}

// Run runs fn under the lease, once, and then releases it: the one way
// work runs under a lease in redsem (Do, asynqmw and scheduler use it).
// fn's context is ctx, cancelled with cause ErrLeaseLost as soon as the lease is lost,
// and carries the lease (LeaseFrom). When fn returns, or panics (the panic goes on after the
// release), the lease is released, detached from ctx and bounded by
// ReleaseTimeout, so a cancelled caller gives its permits back and an
// unreachable Redis costs at most that long; a lost lease is not released.
//
// A nil ctx or fn gives an *ArgumentError; fn is not run and the lease
// stays held.
//
// Run returns fn's error, joined with an error matching ErrLeaseLost
// whenever the lease was lost before fn returned, and with ErrReleaseFailed
// when the release failed (other than the lease being gone).
func (l *Lease) Run(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	switch {
	case ctx == nil:
		return argError("ctx", nil, "must not be nil") // fn not run, the lease stays held
	case fn == nil:
		return argError("fn", nil, "must not be nil")
	}
	runCtx, cancel := context.WithCancelCause(context.WithValue(ctx, leaseCtxKey{}, l))
	defer cancel(nil)
	leaseCtx := l.Context()
	stop := context.AfterFunc(leaseCtx, func() { cancel(context.Cause(leaseCtx)) })
	defer func() {
		stop()
		lost := l.Err()
		if lost != nil && errors.Is(lost, ErrLeaseLost) {
			if !errors.Is(err, ErrLeaseLost) {
				err = errors.Join(err, lost)
			}
			return
		}
		if rerr := l.Release(ctx); rerr != nil && !errors.Is(rerr, ErrNotHeld) {
			err = errors.Join(err, fmt.Errorf("%w: %w", ErrReleaseFailed, rerr))
		}
	}()
	return fn(runCtx)
}

// Do acquires (waiting as Acquire does) and runs fn under the lease (see
// Lease.Run): fn's context is cancelled with cause ErrLeaseLost on loss
// and carries the lease, and the lease is released when fn returns. It
// returns Acquire's error, or fn's error joined with ErrLeaseLost when the
// lease was lost and with ErrReleaseFailed when the release failed.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context) error, opts ...AcquireOption) error {
	if fn == nil {
		return argError("fn", nil, "must not be nil")
	}
	l, err := s.Acquire(ctx, opts...)
	if err != nil {
		return err
	}
	return l.Run(ctx, fn)
}
