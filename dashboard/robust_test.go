package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/dashboard"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// A filtered overview is the sample's names filtered here: it asks
// nothing of Redis (no SCAN per request).
func TestFilterAsksNoRedis(t *testing.T) {
	f := newFixture(t)
	f.hold(t, f.sem(t, "jobs", 2), "a", 1)
	f.hold(t, f.sem(t, "mail", 2), "a", 1)
	f.eventually(t, "api/overview", "jobs and mail", func(b string) bool { return len(decode[overviewJSON](t, b).Names) == 2 })
	f.dash.Close() // no sampling from now on: every command would be the filter's
	f.srv.ResetStats(t)
	for range 10 {
		f.get(t, "?match=j*&part=live")
		_, body := f.get(t, "api/overview?match=j*")
		if names := decode[overviewJSON](t, body).Names; len(names) != 1 || names[0].Name != "jobs" {
			t.Fatalf("match j*: %+v", names)
		}
	}
	if calls := f.srv.CommandCalls(t); len(calls) > 1 || calls["scan"] > 0 {
		t.Errorf("20 filtered requests sent Redis %v", calls)
	}
}

// One key of the wrong type under the prefix is its name's error; the
// other names are read all the same, and the sample has not failed.
func TestBadKeyIsItsNamesError(t *testing.T) {
	f := newFixture(t)
	f.hold(t, f.sem(t, "jobs", 2), "a", 1)
	if err := f.srv.Client(t).Set(f.ctx, testPrefix+"{bogus}:state", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	body := f.eventually(t, "api/overview", "bogus listed", func(b string) bool { return strings.Contains(b, "bogus") })
	o := decode[overviewJSON](t, body)
	if o.Err != "" || len(o.Names) != 2 {
		t.Fatalf("overview: %s", body)
	}
	if !strings.Contains(body, `"error":"`) || !strings.Contains(body, "WRONGTYPE") {
		t.Errorf("bogus does not show its error: %s", body)
	}
	_, m := f.get(t, "metrics")
	if !strings.Contains(m, "redsem_fleet_sample_failed 0") || !strings.Contains(m, `redsem_fleet_in_use{name="jobs"} 1`) {
		t.Errorf("metrics:\n%s", m)
	}
	_, html := f.get(t, "name?name=bogus")
	if !strings.Contains(html, "could not be read") {
		t.Errorf("the page of bogus:\n%s", html)
	}
}

// With a go-redis client that never times out a read, a hung Redis makes
// the sample stale within a few intervals (pages and /metrics say so),
// pages answer at once, and Close returns within a second or so.
func TestRedisHangs(t *testing.T) {
	srv := redistest.StartServer(t)
	app := redistest.Limiter(t, srv.Client(t), limiter.Prefix(testPrefix))
	s, _ := app.Semaphore("jobs", 2)
	if _, err := s.TryAcquire(t.Context(), limiter.ID("a")); err != nil {
		t.Fatal(err)
	}
	c := waitingClient(t, srv)
	d, err := dashboard.New(c, dashboard.Interval(testInterval))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	hs := httptest.NewServer(d)
	defer hs.Close()
	get := func(p string) string {
		cl := &http.Client{Timeout: 2 * time.Second}
		res, err := cl.Get(hs.URL + "/" + p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	redistest.Eventually(t, 5*time.Second, "jobs sampled", func() bool { return strings.Contains(get("api/overview"), "jobs") })
	srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	time.Sleep(6 * testInterval)
	if m := get("metrics"); !strings.Contains(m, "redsem_fleet_sample_failed 1") {
		t.Errorf("Redis hung for 6 intervals, metrics:\n%s", m)
	}
	if b := get("?match=j*&part=live"); !strings.Contains(b, "no sample for") || !strings.Contains(b, "jobs") {
		t.Errorf("Redis hung, the filtered page:\n%s", b)
	}
	start := time.Now()
	d.Close()
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Close took %v while Redis hung", took)
	}
	srv.Resume(t)
	resumed = true
}

// A name beyond MaxNames says so on its page, and /metrics counts the
// names left out.
func TestBeyondMaxNames(t *testing.T) {
	f := newFixture(t, dashboard.MaxNames(2))
	for _, n := range []string{"a", "b", "c"} {
		f.hold(t, f.sem(t, n, 2), "h", 1)
	}
	f.eventually(t, "api/overview", "c omitted", func(b string) bool { return strings.Contains(b, `"omitted":1`) })
	if _, html := f.get(t, "name?name=c&part=live"); !strings.Contains(html, "beyond the dashboard's MaxNames") {
		t.Errorf("page of c:\n%s", html)
	}
	if _, m := f.get(t, "metrics"); !strings.Contains(m, "redsem_fleet_names_omitted 1") {
		t.Errorf("metrics:\n%s", m)
	}
}

// After Close an action is refused (503) and the pages do not change.
func TestActionAfterClose(t *testing.T) {
	f := newFixture(t, dashboard.Actions(testToken))
	f.hold(t, f.sem(t, "jobs", 2), "a", 1)
	f.eventually(t, "api/overview", "jobs", func(b string) bool { return strings.Contains(b, "jobs") })
	f.dash.Close()
	_, before := f.get(t, "api/overview")
	status, body := f.post(t, "actions/limit", url.Values{"name": {"jobs"}, "n": {"7"}}, withToken)
	if _, after := f.get(t, "api/overview"); status != http.StatusServiceUnavailable || after != before {
		t.Errorf("action after Close: %d %s; overview before\n%s\nafter\n%s", status, body, before, after)
	}
	if limit, err := inspect.New(f.app).Limit(f.ctx, "jobs"); err != nil || limit != 0 {
		t.Errorf("the limit was set after Close: %d, %v", limit, err)
	}
}

// The live part has an ETag of all but its sample time: a page whose
// names did not change gets 304 and the sample time alone.
func TestLiveNotModified(t *testing.T) {
	f := newFixture(t)
	if err := inspect.New(f.app).SetLimit(f.ctx, "jobs", 3); err != nil {
		t.Fatal(err)
	}
	f.eventually(t, "api/overview", "jobs", func(b string) bool { return strings.Contains(b, "jobs") })
	get := func(tag string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, f.http.URL+"/?part=live", nil)
		if tag != "" {
			req.Header.Set("If-None-Match", tag)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	first := get("")
	time.Sleep(3 * testInterval)
	res := get(first.Header.Get("ETag"))
	if res.StatusCode != http.StatusNotModified || res.Header.Get("X-Redsem-Sampled") == "" {
		t.Errorf("nothing changed, 3 samples later: %d, sampled %q", res.StatusCode, res.Header.Get("X-Redsem-Sampled"))
	}
	if err := inspect.New(f.app).SetLimit(f.ctx, "jobs", 4); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 5*time.Second, "a 200 once the limit changed", func() bool { return get(first.Header.Get("ETag")).StatusCode == 200 })
}

// Mounted under a prefix, static serves files only: no directory
// listing, no redirect out of the mount.
func TestStaticFilesOnly(t *testing.T) {
	f := newFixture(t)
	mux := http.NewServeMux()
	mux.Handle("/redsem/", http.StripPrefix("/redsem", f.dash))
	for path, want := range map[string]int{"/redsem/static": 404, "/redsem/static/": 404, "/redsem/static/dashboard.js": 200,
		"/redsem/static/index.html": 404, "/redsem/static/..%2fdashboard.go": 404} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want || rec.Header().Get("Location") != "" {
			t.Errorf("GET %s: %d (Location %q), want %d", path, rec.Code, rec.Header().Get("Location"), want)
		}
	}
}

// A page asked for while the first sample hangs answers within a few
// intervals ("no sample yet"), not at the sample's Timeout.
func TestFirstSampleHangs(t *testing.T) {
	srv := redistest.StartServer(t)
	c := waitingClient(t, srv)
	srv.Pause(t)
	d, err := dashboard.New(c, dashboard.Interval(testInterval))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?part=live", nil))
	took := time.Since(start)
	d.Close()
	srv.Resume(t)
	if took > time.Second || !strings.Contains(rec.Body.String(), "no sample yet") {
		t.Errorf("first sample hung: the page took %v: %s", took, rec.Body.String())
	}
}

// waitingClient is a Client on srv whose reads never time out, so that
// only the dashboard's own Timeout can end a read of a paused server.
func waitingClient(t *testing.T, srv *redistest.Server) *limiter.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := limiter.New(rdb, limiter.Prefix(testPrefix), limiter.RestartQuarantine(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}
