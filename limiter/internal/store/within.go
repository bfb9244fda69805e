package store

import "context"

// Within returns when fn does or ctx ends, whichever is first: go-redis
// honours context deadlines on the socket only with ContextTimeoutEnabled,
// and a paused node must not hold anything up. fn runs in a goroutine
// started by spawn, so its owner can wait for it when it closes.
func Within[T any](ctx context.Context, spawn func(func()), fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	spawn(func() {
		v, err := fn()
		done <- result{v, err}
	})
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, context.Cause(ctx)
	}
}
