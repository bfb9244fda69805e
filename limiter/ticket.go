package limiter

import (
	"net/url"
	"strconv"
	"strings"
)

// ticketPrefix versions the text form so it can change without breaking
// tasks already enqueued.
const ticketPrefix = "redsem1:"

// Ticket identifies a held lease so another process can adopt it with
// Semaphore.Resume or release it with Semaphore.ReleaseTicket: the
// cron-to-worker handoff. Its text form (String, MarshalText) fits in an
// asynq task header.
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
