package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/redsem/redsem/internal/namestate"
	"github.com/redsem/redsem/limiter"
)

// releaseResult is what release prints with -json.
type releaseResult struct {
	Name     string           `json:"name"`
	Released namestate.Holder `json:"released"`
}

// release force-releases the lease of name with that id, by the fencing
// token Redis lists for it now: a lease that ended or was handed over in
// between is left alone. Its permits go to the next waiter at once; the
// holder learns of the loss at its next refresh.
func release(ctx context.Context, w io.Writer, c *limiter.Client, name, id string, asJSON bool) error {
	h, err := namestate.Release(ctx, c, name, id)
	if nl := (*namestate.NoLeaseError)(nil); errors.As(err, &nl) {
		return fmt.Errorf("%s has no lease with id %q (%d holders: see redsem show %s)", name, id, nl.Holders, name)
	}
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, releaseResult{Name: name, Released: h})
	}
	_, err = fmt.Fprintf(w, "%s: released lease %s (weight %d, token %d, %s left); its holder learns of the loss at its next refresh\n",
		name, id, h.Weight, h.Token, ttlText(h.TTLms))
	return err
}
