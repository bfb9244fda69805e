package dashboard

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/redsem/redsem/internal/namestate"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// TokenHeader is the header that carries the actions' token (the form
// field "token" may carry it instead).
const TokenHeader = "X-Redsem-Token"

// maxActionBody bounds an action's form.
const maxActionBody = 64 << 10

var (
	errActionsOff = errors.New("dashboard: actions are off (start the dashboard with them on, with a token)")
	errBadToken   = errors.New("dashboard: a valid token is required in the " + TokenHeader + " header or the token field")
	errNoAction   = errors.New("dashboard: no such action")
)

// crossOrigin refuses a POST that a browser says comes from another site
// (Sec-Fetch-Site), or whose Origin is not the dashboard's host.
var crossOrigin = http.NewCrossOriginProtection()

// actions are what a POST to actions/NAME does, with the form's fields,
// and what it says when done.
var actions = map[string]func(ctx context.Context, d *Dashboard, name string, form func(string) string) (string, error){
	"release": func(ctx context.Context, d *Dashboard, name string, form func(string) string) (string, error) {
		h, err := namestate.Release(ctx, d.c, name, form("id"))
		return fmt.Sprintf("released lease %s of %s (weight %d, token %d): its holder learns of the loss at its next refresh", h.ID, name, h.Weight, h.Token), err
	},
	"limit": func(ctx context.Context, d *Dashboard, name string, form func(string) string) (string, error) {
		n, err := strconv.ParseInt(form("n"), 10, 64)
		if err != nil {
			return "", argError("n", strconv.Quote(form("n")), "must be a whole number (0 clears the fleet limit)")
		}
		return fmt.Sprintf("fleet limit of %s set to %d (0: cleared)", name, n), inspect.New(d.c).SetLimit(ctx, name, n)
	},
	"rate": func(ctx context.Context, d *Dashboard, name string, form func(string) string) (string, error) {
		r := limiter.Rate{}
		if text := form("rate"); text != "off" {
			var err error
			if r, err = limiter.ParseRate(text); err != nil {
				return "", err
			}
		}
		return fmt.Sprintf("fleet rate of %s set to %v (off: cleared)", name, r), inspect.New(d.c).SetRate(ctx, name, r)
	},
	"pause": func(ctx context.Context, d *Dashboard, name string, form func(string) string) (string, error) {
		dur, err := time.ParseDuration(form("duration"))
		if err != nil {
			return "", argError("duration", strconv.Quote(form("duration")), "must be a duration such as 30s or 5m")
		}
		left, err := inspect.New(d.c).Pause(ctx, name, dur)
		return fmt.Sprintf("%s paused for %v", name, left.Round(time.Millisecond)), err
	},
	"unpause": func(ctx context.Context, d *Dashboard, name string, _ func(string) string) (string, error) {
		return name + " unpaused", inspect.New(d.c).Unpause(ctx, name)
	},
}

// actionResult is what an action that worked answers.
type actionResult struct {
	OK      bool   `json:"ok"`
	Message string `json:"message"`
}

// act runs an action, if the actions are on, the request comes from the
// dashboard's own origin and carries the token; then samples at once, so
// that the pages show what it did (without adding a point to the charts).
func (d *Dashboard) act(w http.ResponseWriter, r *http.Request) {
	if status, err := d.allowed(r); err != nil {
		writeError(w, status, err)
		return
	}
	run, ok := actions[r.PathValue("action")]
	if !ok {
		writeError(w, http.StatusNotFound, errNoAction)
		return
	}
	name := r.PostFormValue("name")
	if name == "" {
		writeError(w, http.StatusBadRequest, argError("name", `""`, "must not be empty"))
		return
	}
	msg, err := run(r.Context(), d, name, r.PostFormValue)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	d.s.want(name)
	d.s.sample(r.Context(), false)
	writeJSON(w, http.StatusOK, actionResult{OK: true, Message: msg})
}

// allowed checks, in this order, that the actions are on, that the
// dashboard is not closed, that the request is not cross-site, and its
// token.
func (d *Dashboard) allowed(r *http.Request) (int, error) {
	if !d.cfg.actions {
		return http.StatusForbidden, errActionsOff
	}
	if d.s.closed.Load() {
		return http.StatusServiceUnavailable, errClosed
	}
	if err := crossOrigin.Check(r); err != nil {
		return http.StatusForbidden, fmt.Errorf("dashboard: %w", err)
	}
	r.Body = http.MaxBytesReader(nil, r.Body, maxActionBody)
	if err := r.ParseForm(); err != nil {
		return http.StatusBadRequest, fmt.Errorf("dashboard: bad form: %w", err)
	}
	token := r.Header.Get(TokenHeader)
	if token == "" {
		token = r.PostFormValue("token")
	}
	if subtle.ConstantTimeCompare([]byte(token), []byte(d.cfg.token)) != 1 {
		return http.StatusUnauthorized, errBadToken
	}
	return 0, nil
}

// statusOf is the HTTP status of an action's error.
func statusOf(err error) int {
	switch {
	case errors.Is(err, limiter.ErrInvalidArgument):
		return http.StatusBadRequest
	case errors.Is(err, namestate.ErrNoSuchLease):
		return http.StatusNotFound
	case errors.Is(err, limiter.ErrRatesUnsupported):
		return http.StatusNotImplemented
	}
	return http.StatusBadGateway
}
