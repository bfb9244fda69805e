package dashboard_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redsem/redsem/dashboard"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

var withToken = map[string]string{dashboard.TokenHeader: testToken}

// Without Actions, every action is refused and the pages show no control.
func TestActionsOff(t *testing.T) {
	f := newFixture(t)
	jobs := f.sem(t, "jobs", 1)
	f.hold(t, jobs, "w", 1)
	status, body := f.post(t, "actions/release", url.Values{"name": {"jobs"}, "id": {"w"}}, withToken)
	if status != 403 || !strings.Contains(body, "actions are off") {
		t.Errorf("release with actions off: %d %s, want 403", status, body)
	}
	if hs, _ := inspect.New(f.app).Holders(f.ctx, "jobs"); len(hs) != 1 {
		t.Errorf("the lease was released with actions off")
	}
	f.eventually(t, "api/name?name=jobs", "jobs sampled", func(b string) bool { return strings.Contains(b, `"w"`) })
	for _, path := range []string{"", "name?name=jobs"} {
		if _, html := f.get(t, path); strings.Contains(html, "<button class=\"action") || strings.Contains(html, `class="action"`) || strings.Contains(html, `id="token"`) {
			t.Errorf("%q shows action controls with actions off:\n%s", path, html)
		}
	}
}

// With Actions, an action needs the token, and never comes cross-site.
func TestActionsGuard(t *testing.T) {
	f := newFixture(t, dashboard.Actions(testToken))
	l := f.hold(t, f.sem(t, "jobs", 1, limiter.TTL(time.Second)), "w", 1) // refreshed every 333ms
	release := url.Values{"name": {"jobs"}, "id": {"w"}}
	for what, header := range map[string]map[string]string{
		"no token":               nil,
		"wrong token":            {dashboard.TokenHeader: testToken + "x"},
		"cross-site":             {dashboard.TokenHeader: testToken, "Sec-Fetch-Site": "cross-site"},
		"other site":             {dashboard.TokenHeader: testToken, "Origin": "http://evil.example"},
		"token in a cookie only": {"Cookie": "token=" + testToken},
	} {
		status, body := f.post(t, "actions/release", release, header)
		if status != 401 && status != 403 {
			t.Errorf("%s: %d %s, want 401 or 403", what, status, body)
		}
	}
	if status, _ := f.get(t, "actions/release?name=jobs&id=w"); status != 405 {
		t.Errorf("GET of an action: %d, want 405", status)
	}
	if hs, _ := inspect.New(f.app).Holders(f.ctx, "jobs"); len(hs) != 1 {
		t.Fatalf("a refused request released the lease")
	}
	status, body := f.post(t, "actions/release", release, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": f.http.URL, dashboard.TokenHeader: testToken})
	if status != 200 {
		t.Fatalf("release with the token: %d %s", status, body)
	}
	if hs, _ := inspect.New(f.app).Holders(f.ctx, "jobs"); len(hs) != 0 {
		t.Errorf("released, but Redis still lists %+v", hs)
	}
	select {
	case <-l.Context().Done():
		if cause := context.Cause(l.Context()); !errors.Is(cause, limiter.ErrLeaseLost) {
			t.Errorf("the holder's lease ended with %v, want ErrLeaseLost", cause)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the holder did not learn of the release")
	}
	if status, body := f.post(t, "actions/release", url.Values{"name": {"jobs"}, "id": {"w"}, "token": {testToken}}, nil); status != 404 {
		t.Errorf("release again (token in the form): %d %s, want 404", status, body)
	}
}

// The limit, rate, pause and unpause actions change Redis; bad input is a
// 400 naming the argument.
func TestActionsSetAndPause(t *testing.T) {
	f := newFixture(t, dashboard.Actions(testToken))
	in := inspect.New(f.app)
	post := func(action string, form url.Values) (int, string) {
		return f.post(t, "actions/"+action, form, withToken)
	}
	if status, body := post("limit", url.Values{"name": {"jobs"}, "n": {"4"}}); status != 200 {
		t.Fatalf("limit: %d %s", status, body)
	}
	if n, _ := in.Limit(f.ctx, "jobs"); n != 4 {
		t.Errorf("fleet limit %d, want 4", n)
	}
	if status, body := post("rate", url.Values{"name": {"api"}, "rate": {"60/1m burst 5"}}); status != 200 {
		t.Fatalf("rate: %d %s", status, body)
	}
	if s, _ := in.Rate(f.ctx, "api"); s.Fleet != (limiter.Rate{Events: 60, Per: time.Minute, Burst: 5}) {
		t.Errorf("fleet rate %v", s.Fleet)
	}
	if status, body := post("pause", url.Values{"name": {"api"}, "duration": {"30s"}}); status != 200 {
		t.Fatalf("pause: %d %s", status, body)
	}
	if s, _ := in.Rate(f.ctx, "api"); s.Paused <= 20*time.Second {
		t.Errorf("paused for %v, want about 30s", s.Paused)
	}
	if _, html := f.get(t, "name?name=api"); !strings.Contains(html, `class="paused"`) || !strings.Contains(html, `action="actions/unpause"`) {
		t.Errorf("the name page does not show the pause and its controls:\n%s", html)
	}
	if status, body := post("unpause", url.Values{"name": {"api"}}); status != 200 {
		t.Fatalf("unpause: %d %s", status, body)
	}
	if s, _ := in.Rate(f.ctx, "api"); s.Paused != 0 {
		t.Errorf("still paused for %v", s.Paused)
	}
	for action, form := range map[string]url.Values{
		"limit":   {"name": {"jobs"}, "n": {"many"}},
		"rate":    {"name": {"api"}, "rate": {"fast"}},
		"pause":   {"name": {"api"}, "duration": {"forever"}},
		"unpause": {"name": {""}},
	} {
		if status, body := post(action, form); status != 400 || !strings.Contains(body, "invalid") {
			t.Errorf("%s %v: %d %s, want 400 naming the argument", action, form, status, body)
		}
	}
	if status, _ := post("explode", url.Values{"name": {"jobs"}}); status != 404 {
		t.Errorf("an unknown action: %d, want 404", status)
	}
}
