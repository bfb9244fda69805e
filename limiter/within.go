package limiter

import "context"

// within returns when fn does or ctx ends, whichever is first: go-redis
// honours context deadlines on the socket only with ContextTimeoutEnabled,
// and a paused node must not hold up the quorum.
func within[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, context.Cause(ctx)
	}
}
