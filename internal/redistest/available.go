package redistest

import (
	"context"

	"github.com/redsem/redsem/limiter/inspect"
)

// Available is how many permits of name are free under its effective
// limit (the fleet-wide one, else own), as in reads it: what tests of the
// packages built on limiter check once a holder is gone.
func Available(ctx context.Context, in *inspect.Inspector, name string, own int64) (int64, error) {
	limit, err := in.Limit(ctx, name)
	if err != nil {
		return 0, err
	}
	if limit == 0 {
		limit = own
	}
	hs, err := in.Holders(ctx, name)
	if err != nil {
		return 0, err
	}
	for _, h := range hs {
		limit -= h.Weight
	}
	return max(limit, 0), nil
}
