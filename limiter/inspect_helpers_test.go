package limiter_test

import (
	"context"

	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// holders, waiters, available, effectiveLimit, setLimit and inUseOf read
// or set a Semaphore's name through an Inspector of its Client: the
// tests' shorthand.
func holders(ctx context.Context, s *limiter.Semaphore) ([]inspect.Holder, error) {
	return inspectorOf(s).Holders(ctx, s.Name())
}

func waiters(ctx context.Context, s *limiter.Semaphore) ([]inspect.Waiter, error) {
	return inspectorOf(s).Waiters(ctx, s.Name())
}

// available is how many permits are free under the effective limit.
func available(ctx context.Context, s *limiter.Semaphore) (int64, error) {
	limit, _, err := effectiveLimit(ctx, s)
	if err != nil {
		return 0, err
	}
	hs, err := holders(ctx, s)
	if err != nil {
		return 0, err
	}
	for _, h := range hs {
		limit -= h.Weight
	}
	return max(limit, 0), nil
}

// effectiveLimit is the fleet-wide limit (fleet true), or s's own.
func effectiveLimit(ctx context.Context, s *limiter.Semaphore) (int64, bool, error) {
	n, err := inspectorOf(s).Limit(ctx, s.Name())
	if n > 0 || err != nil {
		return n, n > 0, err
	}
	return s.Limit(), false, nil
}

func setLimit(ctx context.Context, s *limiter.Semaphore, n int64) error {
	return inspectorOf(s).SetLimit(ctx, s.Name(), n)
}

func inUseOf(ctx context.Context, s *limiter.Semaphore) (inspect.InUse, error) {
	return inspectorOf(s).InUse(ctx, s.Name())
}

func inspectorOf(s *limiter.Semaphore) *inspect.Inspector { return inspect.New(limiter.ClientOf(s)) }
