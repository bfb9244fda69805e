package dashboard_test

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redsem/redsem/dashboard"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// overviewJSON is what api/overview answers, the fields the tests read.
type overviewJSON struct {
	SampledAt time.Time `json:"sampled_at"`
	Err       string    `json:"error"`
	Names     []struct {
		Name         string `json:"name"`
		Semaphore    bool   `json:"semaphore"`
		FleetLimit   *int64 `json:"fleet_limit"`
		InUse        int64  `json:"in_use"`
		Holders      int    `json:"holders"`
		Waiters      int    `json:"waiters"`
		OldestWaitMs int64  `json:"oldest_wait_ms"`
		Saturated    bool   `json:"saturated"`
		Rate         *struct {
			FleetRate *struct{ Events int64 } `json:"fleet_rate"`
			PausedMs  int64                   `json:"paused_ms"`
		} `json:"rate"`
	} `json:"names"`
}

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	return v
}

// The overview lists every semaphore and rate limit, saturated names
// first, in JSON and in HTML.
func TestOverview(t *testing.T) {
	f := newFixture(t)
	jobs := f.sem(t, "jobs", 2, limiter.AcquireTimeout(0))
	f.hold(t, jobs, "worker-1", 2)
	f.queue(t, jobs, 1)
	f.hold(t, f.sem(t, "idle", 5), "w", 1)
	in := inspect.New(f.app)
	if err := in.SetRate(f.ctx, "api", limiter.Rate{Events: 100, Per: time.Minute, Burst: 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Pause(f.ctx, "api", time.Minute); err != nil {
		t.Fatal(err)
	}
	body := f.eventually(t, "api/overview", "three names sampled", func(b string) bool {
		return len(decode[overviewJSON](t, b).Names) == 3
	})
	o := decode[overviewJSON](t, body)
	j := o.Names[0]
	if j.Name != "api" && j.Name != "jobs" || !j.Saturated {
		t.Fatalf("first row %+v: want a saturated one (api paused, jobs with a waiter)", j)
	}
	if last := o.Names[2]; last.Name != "idle" || last.Saturated || last.InUse != 1 {
		t.Errorf("last row %+v: want idle, not saturated, 1 in use", last)
	}
	for _, n := range o.Names {
		switch n.Name {
		case "jobs":
			if n.InUse != 2 || n.Holders != 1 || n.Waiters != 1 || n.FleetLimit != nil || !n.Semaphore {
				t.Errorf("jobs: %+v", n)
			}
		case "api":
			if n.Semaphore || n.Rate == nil || n.Rate.FleetRate == nil || n.Rate.FleetRate.Events != 100 || n.Rate.PausedMs <= 0 {
				t.Errorf("api: %+v", n)
			}
		}
	}
	_, html := f.get(t, "")
	for _, want := range []string{`class="saturated" data-name="jobs"`, `href="name?name=jobs"`, `100/1m0s burst 20`, `data-name="idle"`} {
		if !strings.Contains(html, want) {
			t.Errorf("overview HTML lacks %s:\n%s", want, html)
		}
	}
	if i, k := strings.Index(html, `data-name="jobs"`), strings.Index(html, `data-name="idle"`); i > k {
		t.Errorf("overview HTML lists idle before the saturated jobs")
	}
	if _, byName := f.get(t, "?sort=name"); strings.Index(byName, `data-name="api"`) > strings.Index(byName, `data-name="idle"`) {
		t.Errorf("sort=name lists idle before api")
	}
}

// nameJSON is what api/name answers, the fields the tests read.
type nameJSON struct {
	Name    string `json:"name"`
	InUse   int64  `json:"in_use"`
	Holders []struct {
		ID     string `json:"id"`
		Weight int64  `json:"weight"`
		Token  int64  `json:"token"`
		TTLms  int64  `json:"ttl_ms"`
		AgeMs  *int64 `json:"age_ms"`
	} `json:"holders"`
	Waiters []struct {
		ID     string `json:"id"`
		Weight int64  `json:"weight"`
		AgeMs  int64  `json:"age_ms"`
		Limit  int64  `json:"limit"`
	} `json:"waiters"`
	OldestWaitMs int64 `json:"oldest_wait_ms"`
}

// A name's page lists its holders with token, age and TTL, and its queue
// in order with ages; the history has points.
func TestNamePage(t *testing.T) {
	f := newFixture(t)
	jobs := f.sem(t, "jobs", 3, limiter.AcquireTimeout(0))
	a := f.hold(t, jobs, "worker-a", 2)
	f.hold(t, jobs, "worker-b", 1)
	f.queue(t, jobs, 2)
	f.queue(t, jobs, 1)
	time.Sleep(3 * testInterval) // the waiters age
	body := f.eventually(t, "api/name?name=jobs", "two holders and two waiters", func(b string) bool {
		n := decode[nameJSON](t, b)
		return len(n.Holders) == 2 && len(n.Waiters) == 2 && n.OldestWaitMs > 0
	})
	n := decode[nameJSON](t, body)
	h := n.Holders[0]
	if h.ID != "worker-a" || h.Token != a.Token() || h.Weight != 2 || h.TTLms <= 0 || h.AgeMs == nil || *h.AgeMs > 10_000 {
		t.Errorf("first holder %+v: want worker-a, token %d, weight 2, a TTL and an age under 10s", h, a.Token())
	}
	if n.Waiters[0].Weight != 2 || n.Waiters[1].Weight != 1 || n.Waiters[0].AgeMs < n.Waiters[1].AgeMs || n.Waiters[0].Limit != 3 {
		t.Errorf("waiters %+v: want weight 2 then 1, the first waiting longer, under their own limit 3", n.Waiters)
	}
	_, html := f.get(t, "name?name=jobs")
	for _, want := range []string{"<h1>jobs</h1>", `data-id="worker-a"`, `data-chart="use"`, "static/uPlot.iife.min.js", "nobody waits"} {
		if strings.Contains(html, want) != (want != "nobody waits") {
			t.Errorf("name page: contains %q is wrong:\n%s", want, html)
		}
	}
	type history struct {
		Time  []float64  `json:"time"`
		InUse []*float64 `json:"in_use"`
		Limit []*float64 `json:"limit"`
	}
	// The limit in use comes with the holder's first record (within a
	// second of its first use).
	hist := decode[history](t, f.eventually(t, "api/history?name=jobs", "history points with the limit in use", func(b string) bool {
		h := decode[history](t, b)
		return len(h.Time) > 3 && len(h.Limit) == len(h.Time) && h.Limit[len(h.Limit)-1] != nil
	}))
	if len(hist.Time) < 2 || len(hist.InUse) != len(hist.Time) || *hist.InUse[len(hist.InUse)-1] != 3 ||
		hist.Limit[len(hist.Limit)-1] == nil || *hist.Limit[len(hist.Limit)-1] != 3 {
		// No fleet limit: the chart's limit is the one the process applies.
		t.Errorf("history: %+v; want points, the last 3 in use of the limit 3 in use", hist)
	}
	if status, _ := f.get(t, "api/name?name=nosuch"); status != 404 {
		t.Errorf("api/name of an unknown name: status %d, want 404", status)
	}
}

// Grants between two samples are counted from the tokens.
func TestGrantsPerSecond(t *testing.T) {
	f := newFixture(t)
	jobs := f.sem(t, "jobs", 10)
	f.hold(t, jobs, "first", 1)
	f.eventually(t, "api/name?name=jobs", "jobs sampled", func(b string) bool { return strings.Contains(b, "first") })
	for i := range 3 {
		f.hold(t, jobs, "more-"+string(rune('a'+i)), 1)
	}
	f.eventually(t, "api/history?name=jobs", "3 grants counted", func(b string) bool {
		g := decode[struct {
			Grants []*float64 `json:"grants_per_second"`
		}](t, b).Grants
		var sum float64
		for _, v := range g {
			if v != nil {
				sum += *v * testInterval.Seconds()
			}
		}
		return sum > 2 // 3 grants, give or take the interval's jitter
	})
}

// Names with braces, spaces and glob characters are shown, linked and
// filtered as they are; the glob is Redis's.
func TestOddNamesAndGlobs(t *testing.T) {
	f := newFixture(t)
	odd := []string{"team {a} b", "x*y", `back\slash`, "<script>", "a&b?c=d"}
	for _, name := range append(odd, "plain") {
		f.hold(t, f.sem(t, name, 1), "h", 1)
	}
	f.eventually(t, "api/overview", "six names", func(b string) bool { return len(decode[overviewJSON](t, b).Names) == 6 })
	for glob, want := range map[string][]string{
		"team {*} b": {"team {a} b"},
		`x\*y`:       {"x*y"},
		"[<]*":       {"<script>"},
		`*\\*`:       {`back\slash`},
		"a&b?c=d":    {"a&b?c=d"},
		"[":          nil,
	} {
		_, body := f.get(t, "api/overview?match="+url.QueryEscape(glob))
		var got []string
		for _, n := range decode[overviewJSON](t, body).Names {
			got = append(got, n.Name)
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("match %q: got %q, want %q", glob, got, want)
		}
	}
	_, html := f.get(t, "?match="+url.QueryEscape("*"))
	if strings.Contains(html, "<script>") && !strings.Contains(html, "&lt;script&gt;") || strings.Count(html, "<script") != 1 {
		t.Errorf("a name is not escaped in the overview:\n%s", html)
	}
	for _, name := range odd {
		link := "name?name=" + url.QueryEscape(name)
		status, page := f.get(t, link)
		n := decode[nameJSON](t, func() string { _, b := f.get(t, "api/"+link); return b }())
		if status != 200 || n.Name != name || len(n.Holders) != 1 || !strings.Contains(page, `<h1>`) {
			t.Errorf("%q: page status %d, api name %q with %d holders", name, status, n.Name, len(n.Holders))
		}
	}
	if !strings.Contains(html, `href="name?name=team%20%7ba%7d%20b"`) {
		t.Errorf("the link of %q is not its name, percent-encoded:\n%s", "team {a} b", html)
	}
}

// New checks its arguments.
func TestNewArguments(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redistest.Limiter(t, srv.Client(t))
	for what, opts := range map[string][]dashboard.Option{
		"Interval": {dashboard.Interval(time.Millisecond)},
		"History":  {dashboard.History(time.Second)},
		"MaxNames": {dashboard.MaxNames(0)},
		"Actions":  {dashboard.Actions("short")},
	} {
		d, err := dashboard.New(c, opts...)
		var ae *limiter.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != what {
			t.Errorf("%s: %v, want an *ArgumentError naming it", what, err)
		}
		if d != nil {
			d.Close()
		}
	}
	if _, err := dashboard.New(nil); !errors.Is(err, limiter.ErrInvalidArgument) {
		t.Errorf("New(nil): %v", err)
	}
}

// Close stops the sampler: no sample after it, and the pages still serve
// the last one.
func TestCloseStopsSampling(t *testing.T) {
	f := newFixture(t)
	f.hold(t, f.sem(t, "jobs", 1), "w", 1)
	f.eventually(t, "api/overview", "jobs sampled", func(b string) bool { return strings.Contains(b, "jobs") })
	f.dash.Close()
	_, before := f.get(t, "api/overview")
	time.Sleep(3 * testInterval)
	if _, after := f.get(t, "api/overview"); after != before || !strings.Contains(after, "jobs") {
		t.Errorf("sampled after Close, or lost the last sample:\n%s\n%s", before, after)
	}
}
