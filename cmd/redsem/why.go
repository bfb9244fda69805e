package main

import (
	"context"
	"fmt"
	"io"

	"github.com/redsem/redsem/internal/namestate"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// whyResult is what why prints with -json: the waiter's id ("" for a
// request made now) and why it waits.
type whyResult struct {
	Name  string `json:"name"`
	ID    string `json:"id"`
	InUse int64  `json:"in_use"`
	Limit int64  `json:"limit"` // the limit it is served under (0: not known)
	namestate.Why
}

// why prints why the waiter id of name waits and when it should be
// granted; with id "", why a request of weight 1 made now would.
func why(ctx context.Context, w io.Writer, c *limiter.Client, name, id string, asJSON bool) error {
	y, err := inspect.New(c).Why(ctx, name, id)
	if err != nil {
		return err
	}
	r := whyResult{Name: name, ID: id, InUse: y.InUse, Limit: y.Limit, Why: namestate.WhyOf(y)}
	if asJSON {
		return writeJSON(w, r)
	}
	_, err = fmt.Fprintln(w, whyText(r))
	return err
}

// whyText is why's line:
//
//	jobs: w-1 waits: full: 2 waiters (3 permits) ahead, 5 of 5 in use; granted in ~1.2s (estimated)
func whyText(r whyResult) string {
	who := r.ID + " waits"
	if r.ID == "" {
		who = "a request made now would wait"
	}
	var because string
	switch r.Reason {
	case "":
		if r.ID == "" {
			return fmt.Sprintf("%s: a request made now would be granted at once", r.Name)
		}
		because = "nothing: its grant is on its way"
	case "full", "fleet-limit":
		because = fmt.Sprintf("%d waiter(s) (%d permit(s)) ahead, %d of %s in use", r.Ahead, r.AheadPermits, r.InUse, limitOf(r.Limit))
		if r.Reason == "fleet-limit" {
			because = "the fleet limit (redsem limit) is below its own: " + because
		}
	case "paused":
		because = "the name is paused (redsem pause)"
	case "quarantine":
		because = "Redis restarted and grants nothing on the name until the restart quarantine ends"
	case "rate":
		because = "the rate has no slot before its next one"
	default:
		because = r.Reason
	}
	when := "never: it is heavier than the fleet limit"
	switch {
	case r.ETAms != nil && r.Estimated:
		when = "granted in ~" + ttlText(*r.ETAms) + " (estimated from the holders' ages)"
	case r.ETAms != nil:
		when = "granted in " + ttlText(*r.ETAms)
	}
	return fmt.Sprintf("%s: %s: %s: %s; %s", r.Name, who, r.Reason, because, when)
}

func limitOf(n int64) string {
	if n <= 0 {
		return "-"
	}
	return fmt.Sprint(n)
}
