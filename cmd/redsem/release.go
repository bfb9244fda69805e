package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/redsem/redsem/limiter"
)

// releaseResult is what release prints with -json.
type releaseResult struct {
	Name     string     `json:"name"`
	Released holderInfo `json:"released"`
}

// release force-releases the lease of name with that id, by the fencing
// token Redis lists for it now: a lease that ended or was handed over in
// between is left alone. Its permits go to the next waiter at once; the
// holder learns of the loss at its next refresh.
func release(ctx context.Context, w io.Writer, c *limiter.Client, name, id string, asJSON bool) error {
	sem, err := semOf(c, name)
	if err != nil {
		return err
	}
	hs, err := c.Inspector().Holders(ctx, name)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(hs, func(h limiter.Holder) bool { return h.ID == id })
	if i < 0 {
		return fmt.Errorf("%s has no lease with id %q (%d holders: see redsem show %s)", name, id, len(hs), name)
	}
	h := holderOf(hs[i])
	err = sem.ReleaseTicket(ctx, limiter.Ticket{Name: name, ID: id, Weight: h.Weight, Token: h.Token})
	if errors.Is(err, limiter.ErrNotHeld) {
		return fmt.Errorf("lease %q of %s expired or changed hands (token %d) before it could be released: nothing removed", id, name, h.Token)
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

// anyLimit is the largest limit the limiter accepts (2^40).
const anyLimit = 1 << 40

// semOf returns the Semaphore of name that release gives a lease back
// through. It never acquires, so its own limit is made up: the largest,
// because ReleaseTicket refuses a ticket heavier than it.
func semOf(c *limiter.Client, name string) (*limiter.Semaphore, error) {
	return c.Semaphore(name, anyLimit)
}
