package limiter

import "context"

// within returns when fn does or ctx ends, whichever is first: go-redis
// honours context deadlines on the socket only with ContextTimeoutEnabled,
// and a paused node must not hold anything up. fn runs in a goroutine
// started by spawn, so its owner can wait for it when it closes.
//
// Callers that run on a context of their own (a release, a leaver, a
// refresh) use bounded instead, which skips the goroutine when the store
// needs none.
func within[T any](ctx context.Context, spawn func(func()), fn func() (T, error)) (T, error) {
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

// bounded runs fn, a store call with ctx, so that it returns by ctx's
// deadline. When the store honours that deadline by itself (see
// store.boundedByCtx) fn runs on the caller's goroutine: handing the call
// to a goroutine and back costs about 30 µs on a loaded 2-core machine, a
// fifth of an uncontended acquire and release (BENCHMARKS.md).
func bounded[T any](c *Client, ctx context.Context, fn func() (T, error)) (T, error) {
	if c.st.boundedByCtx() {
		return fn()
	}
	return within(ctx, c.spawn, fn)
}
