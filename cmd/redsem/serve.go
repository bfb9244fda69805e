package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/redsem/redsem/dashboard"
	"github.com/redsem/redsem/limiter"
)

// serveOptions are serve's flags.
type serveOptions struct {
	listen      string
	actions     bool
	token       string
	intervalSet bool // -interval was given: it paces the sampler
}

// tokenEnv holds the actions' token when -token is not given (it keeps
// the token out of the process list).
const tokenEnv = "REDSEM_TOKEN"

// withEnv takes the token from the environment when -actions has none,
// and refuses a token without -actions (a mistake: the operator believes
// the actions are guarded, or on).
func (s serveOptions) withEnv(getenv func(string) string) (serveOptions, error) {
	switch {
	case !s.actions && s.token != "":
		return s, usagef("-token is only for -actions")
	case !s.actions:
		return s, nil
	case s.token == "":
		s.token = getenv(tokenEnv)
	}
	if s.token == "" {
		return s, usagef("-actions needs a token: -token T or $%s", tokenEnv)
	}
	if len(s.token) < dashboard.MinTokenLen {
		return s, usagef("-token (or $%s): the actions' token must have at least %d characters", tokenEnv, dashboard.MinTokenLen)
	}
	return s, nil
}

// checkServeInterval refuses an -interval that the dashboard would:
// below its minimum, or leaving fewer than 10 samples in its charts.
func checkServeInterval(d time.Duration) error {
	if d < dashboard.MinInterval || 10*d > dashboard.DefaultHistory {
		return usagef("-interval %v: serve samples every %v to %v", d, dashboard.MinInterval, dashboard.DefaultHistory/10)
	}
	return nil
}

// serveShutdown bounds how long serve waits for requests under way when
// it ends.
const serveShutdown = 5 * time.Second

// serve runs the dashboard on -listen until ctx ends (SIGINT, SIGTERM),
// then lets the requests under way finish and returns nil. It says where
// it listens on w first.
func serve(ctx context.Context, w io.Writer, c *limiter.Client, o options) error {
	interval := dashboard.DefaultInterval
	if o.serve.intervalSet {
		interval = o.interval
	}
	opts := []dashboard.Option{dashboard.Source(o.where), dashboard.Interval(interval), dashboard.Timeout(o.timeout)}
	mode := "read-only"
	if o.serve.actions {
		opts, mode = append(opts, dashboard.Actions(o.serve.token)), "actions on"
	}
	d, err := dashboard.New(c, opts...)
	if err != nil {
		return err
	}
	defer d.Close()
	ln, err := net.Listen("tcp", o.serve.listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	var h http.Handler = d
	if loopback(ln.Addr()) {
		h = loopbackHosts(d)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	if _, err := fmt.Fprintf(w, "serving the dashboard of %s on http://%s/ (%s); Ctrl-C ends\n", o.where, ln.Addr(), mode); err != nil {
		ln.Close()
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), serveShutdown)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return err
}

// loopback says whether addr is a loopback address.
func loopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// loopbackHosts refuses (421) a request whose Host is not a loopback
// name or address: a dashboard listening on loopback is reached only
// through one, and another name pointing there (DNS rebinding) is a page
// of another site reading it.
func loopbackHosts(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hn, _, err := net.SplitHostPort(host); err == nil {
			host = hn
		}
		host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
		ip := net.ParseIP(host)
		if !strings.EqualFold(host, "localhost") && !strings.HasSuffix(strings.ToLower(host), ".localhost") && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "redsem serve: this dashboard listens on loopback and answers only a loopback Host, not "+r.Host, http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}
