package namestate

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// anyLimit is the largest limit the limiter accepts (2^40).
const anyLimit = 1 << 40

// ErrNoSuchLease is Release's error when name has no lease with that id
// (any more).
var ErrNoSuchLease = errors.New("no such lease")

// NoLeaseError is Release's error when name has no lease with that id
// now; it matches ErrNoSuchLease.
type NoLeaseError struct {
	Name, ID string
	Holders  int // the leases name has
}

func (e *NoLeaseError) Error() string {
	return fmt.Sprintf("%s has no lease with id %q (%d holders): %v", e.Name, e.ID, e.Holders, ErrNoSuchLease)
}

// Is makes errors.Is(err, ErrNoSuchLease) hold.
func (e *NoLeaseError) Is(target error) bool { return target == ErrNoSuchLease }

// Release force-releases the lease of name with that id, by the fencing
// token Redis lists for it now: a lease that ended or was handed over in
// between is left alone. Its permits go to the next waiter at once; the
// holder learns of the loss at its next refresh. It returns the lease it
// released. A lease that is not there, or that changed hands before the
// release, gives an error matching ErrNoSuchLease (a *NoLeaseError when
// it is not there); other errors are the
// limiter's (an *ArgumentError for a bad name, a Redis failure or ctx's
// end wrapped: the lease may have been released all the same).
func Release(ctx context.Context, c *limiter.Client, name, id string) (Holder, error) {
	// It never acquires, so its own limit is made up: the largest,
	// because ReleaseTicket refuses a ticket heavier than it.
	sem, err := c.Semaphore(name, anyLimit)
	if err != nil {
		return Holder{}, err
	}
	hs, err := inspect.New(c).Holders(ctx, name)
	if err != nil {
		return Holder{}, err
	}
	i := slices.IndexFunc(hs, func(h inspect.Holder) bool { return h.ID == id })
	if i < 0 {
		return Holder{}, &NoLeaseError{Name: name, ID: id, Holders: len(hs)}
	}
	h := HolderOf(hs[i])
	err = sem.ReleaseTicket(ctx, limiter.Ticket{Name: name, ID: id, Weight: h.Weight, Token: h.Token})
	if errors.Is(err, limiter.ErrNotHeld) {
		return h, fmt.Errorf("lease %q of %s expired or changed hands (token %d) before it could be released, nothing removed: %w", id, name, h.Token, ErrNoSuchLease)
	}
	return h, err
}
