package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// Dashboard is the web dashboard of the names under a limiter Client's
// prefix, an http.Handler. Its sampler reads Redis in the background from
// New until Close; the pages, their JSON and /metrics read the sampler's
// latest sample. It is safe for concurrent use.
type Dashboard struct {
	c   *limiter.Client
	cfg config
	s   *sampler
	mux *http.ServeMux

	cancel    context.CancelFunc
	done      chan struct{} // closed when the sampler has stopped
	closeOnce sync.Once
}

//go:embed static
var staticFiles embed.FS

// New returns the dashboard of c's names and starts its sampler, which
// lists the semaphores and rate limits under c's prefix at once and reads
// them every Interval (see the package documentation for what it costs).
// A failed sample (Redis unreachable, c closed) is shown on the pages,
// which keep the last good one, and sampling goes on. Call Close to stop
// it: c is not closed. Bad options give a *limiter.ArgumentError naming
// them, as does a nil c.
func New(c *limiter.Client, opts ...Option) (*Dashboard, error) {
	if c == nil {
		return nil, argError("c", nil, "must not be nil")
	}
	cfg, err := defaultConfig().with(opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dashboard{c: c, cfg: cfg, s: newSampler(inspect.New(c), cfg), cancel: cancel, done: make(chan struct{})}
	d.mux = d.routes()
	go func() {
		defer close(d.done)
		d.s.run(ctx)
	}()
	return d, nil
}

func (d *Dashboard) routes() *http.ServeMux {
	static, _ := fs.Sub(staticFiles, "static") // a constant path: no error
	reg := prometheus.NewRegistry()
	reg.MustRegister(d.Collector())
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", d.overviewPage)
	m.HandleFunc("GET /name", d.namePage)
	m.HandleFunc("GET /api/overview", d.overviewJSON)
	m.HandleFunc("GET /api/name", d.nameData)
	m.HandleFunc("GET /api/history", d.historyData)
	m.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m.HandleFunc("GET /static/{file}", func(w http.ResponseWriter, r *http.Request) { serveStatic(w, r, static) })
	m.HandleFunc("POST /actions/{action}", d.act)
	return m
}

// serveStatic serves an embedded file: files only (no directory listing,
// no redirect, which would leave the mount of a StripPrefix).
func serveStatic(w http.ResponseWriter, r *http.Request, static fs.FS) {
	name := r.PathValue("file")
	if st, err := fs.Stat(static, name); err != nil || !st.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	http.ServeFileFS(w, r, static, name)
}

// ServeHTTP serves the dashboard at the root of its path: mount it with
// http.StripPrefix (every link is relative), e.g.
//
//	mux.Handle("/redsem/", http.StripPrefix("/redsem", d))
//
// A page asked for before the first sample waits for it, for the
// request's context to end or for 3 intervals (then: "no sample yet").
// While Redis cannot be read, the pages show the last good sample and the
// error (JSON: "error"), as they do when no sample came for 3 intervals.
// A glob filter is matched against the sample's names (a malformed glob
// selects what Redis would select with it), never sent to Redis. A name
// that cannot be read shows its error (JSON: the name's "error"). An
// action answers JSON: 200 when done, 400 for bad input (naming it), 401
// without the token, 403 when actions are off or the request is
// cross-site, 404 for a lease that is not held, 502 when Redis failed
// (the change may have been made all the same), 503 after Close.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	d.mux.ServeHTTP(w, r)
}

// Close stops the sampler (a sample under way is cancelled) and returns
// once it has stopped, waiting at most a second for a read that Redis
// does not answer (see Timeout); the pages then show the last sample and
// say the dashboard is closed, and the actions answer 503. It closes no
// connection: the Client is the caller's. Later calls do nothing.
func (d *Dashboard) Close() {
	d.closeOnce.Do(func() {
		d.cancel()
		<-d.done
		d.s.close()
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // a client gone: nothing to do
}

// errorJSON is what a request that failed gets.
type errorJSON struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, errorJSON{Error: err.Error()})
}
