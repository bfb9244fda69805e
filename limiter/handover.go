package limiter

// The handover: a lease acquired in one process (Lease.Ticket) is taken
// over by another (Semaphore.Resume) or released from anywhere
// (Semaphore.ReleaseTicket).

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redsem/redsem/limiter/internal/store"
)

// ticketPrefix versions the text form so it can change without breaking
// tasks already enqueued.
const ticketPrefix = "redsem1:"

// Ticket identifies a held lease so another process can adopt it with
// Semaphore.Resume or release it with Semaphore.ReleaseTicket: the
// cron-to-worker handover. Its text form (String, MarshalText) fits in an
// asynq task header, and survives JSON whatever bytes its name holds.
type Ticket struct {
	Name   string
	ID     string
	Weight int64
	Token  int64
}

// String encodes the ticket as "redsem1:" followed by URL query syntax.
func (t Ticket) String() string {
	v := url.Values{}
	v.Set("name", t.Name)
	v.Set("id", t.ID)
	v.Set("weight", strconv.FormatInt(t.Weight, 10))
	v.Set("token", strconv.FormatInt(t.Token, 10))
	return ticketPrefix + v.Encode()
}

// ParseTicket decodes String's output; anything else is an *ArgumentError
// for "ticket".
func ParseTicket(s string) (Ticket, error) {
	rest, ok := strings.CutPrefix(s, ticketPrefix)
	if !ok {
		return Ticket{}, argError("ticket", s, "does not start with "+ticketPrefix)
	}
	v, err := url.ParseQuery(rest)
	if err != nil {
		return Ticket{}, argError("ticket", s, err.Error())
	}
	t := Ticket{Name: v.Get("name"), ID: v.Get("id")}
	if t.Weight, err = strconv.ParseInt(v.Get("weight"), 10, 64); err != nil {
		return Ticket{}, argError("ticket", s, "weight is not a number")
	}
	if t.Token, err = strconv.ParseInt(v.Get("token"), 10, 64); err != nil {
		return Ticket{}, argError("ticket", s, "token is not a number")
	}
	if err := t.validate(); err != nil {
		return Ticket{}, err
	}
	return t, nil
}

func (t Ticket) validate() error {
	switch {
	case t.Name == "":
		return argError("ticket", t, "has no name")
	case t.ID == "":
		return argError("ticket", t, "has no id")
	case t.Weight < 1:
		return argError("ticket", t, "weight must be >= 1")
	case t.Token < 1:
		return argError("ticket", t, "token must be >= 1")
	}
	return nil
}

// MarshalText implements encoding.TextMarshaler with String's form.
func (t Ticket) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseTicket.
func (t *Ticket) UnmarshalText(b []byte) error {
	p, err := ParseTicket(string(b))
	if err != nil {
		return err
	}
	*t = p
	return nil
}

// Resume takes over a lease acquired elsewhere (the handover): if it is
// still held with the ticket's token, it becomes this Client's, with a new
// fencing token and this Semaphore's TTL from now (shorter or longer than
// before), and is kept alive here like any acquired lease. The previous
// holder's next refresh finds it gone and reports the loss. A lease
// parked by Lease.Park is taken over by a ticket of its id whatever the
// ticket's token. Of two Resumes of one ticket one wins; the other, like a
// lease that expired or was released, gets ErrNotHeld. A ticket for another name, or a weight above
// this limit, gives an *ArgumentError.
func (s *Semaphore) Resume(ctx context.Context, t Ticket) (*Lease, error) {
	if ctx == nil {
		return nil, argError("ctx", nil, "must not be nil")
	}
	if err := s.checkTicket(t); err != nil {
		return nil, err
	}
	if err := s.c.closedErr(); err != nil {
		return nil, err
	}
	// A Resume makes the lease this Client's: no reclaim of the id may run
	// meanwhile, or both would hand out a Lease with the one token.
	_, done, err := s.c.ids.ask(ctx, leaseKey{s.keys.ID(), t.ID}, false, s.cfg.ttl+s.cfg.drift(s.cfg.ttl))
	if err != nil {
		return nil, err
	}
	sent := time.Now()
	rep, err := s.c.st.Resume(ctx, s.keys, store.ResumeRequest{ID: t.ID, Token: strconv.FormatInt(t.Token, 10), Owner: s.c.id, TTL: s.cfg.ttl,
		Replicas: s.cfg.replicas})
	defer func() { done(err, rep.Token) }() // after newLease tracks a resumed lease
	if err != nil {
		return nil, redisError("resume", s.name, err)
	}
	if !rep.Granted {
		return nil, fmt.Errorf("limiter: resume %q lease %s: %w", s.name, t.ID, ErrNotHeld)
	}
	return s.adopt(ctx, "resume", t.ID, true, rep, sent, s.cfg.ttl)
}

// ReleaseTicket releases the lease a ticket names, from any process. It
// returns ErrNotHeld when that lease is no longer held with the ticket's
// token, and never removes a later lease that reuses the id.
func (s *Semaphore) ReleaseTicket(ctx context.Context, t Ticket) error {
	if ctx == nil {
		return argError("ctx", nil, "must not be nil")
	}
	if err := s.checkTicket(t); err != nil {
		return err
	}
	n, err := s.release(ctx, t.ID, strconv.FormatInt(t.Token, 10), false)
	if err != nil {
		return redisError("release", s.name, err)
	}
	if n == 0 {
		return fmt.Errorf("limiter: release %q lease %s: %w", s.name, t.ID, ErrNotHeld)
	}
	return nil
}

func (s *Semaphore) checkTicket(t Ticket) error {
	if err := t.validate(); err != nil {
		return err
	}
	if t.Name != s.name {
		return argError("ticket", t, fmt.Sprintf("is for %q, not %q", t.Name, s.name))
	}
	if t.Weight > s.limit {
		return argError("ticket", t, fmt.Sprintf("weight is above the limit %d", s.limit))
	}
	return nil
}
