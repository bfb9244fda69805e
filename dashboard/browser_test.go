package dashboard_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redsem/redsem/dashboard"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// browserEnv, set by `make test`, makes a missing Chromium a failure
// rather than a skip.
const browserEnv = "REDSEM_BROWSER_REQUIRED"

// screenshotsEnv names where the browser tests leave their screenshots
// (default testdata/screenshots, which git ignores), for a failed run to
// be looked at.
const screenshotsEnv = "REDSEM_SCREENSHOTS"

// newBrowser starts a headless Chromium with a fresh profile, for the
// test; without one it skips, unless under `make test`.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv(browserEnv) != "" {
			t.Fatalf("chromium is missing: `make test` installs it (apt-get install -y chromium)")
		}
		t.Skip("chromium not found: the browser tests need it (apt-get install -y chromium, or run `make test`)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.UserDataDir(t.TempDir()), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.WindowSize(1280, 1000),
		// Without these Chromium dials out, which this sandbox refuses.
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// run runs actions within d, or fails the test saying what.
func run(t *testing.T, ctx context.Context, d time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(tctx, actions...); err != nil {
		screenshot(t, ctx, "failed-"+strings.ReplaceAll(t.Name(), "/", "-"))
		t.Fatalf("%s: %v", what, err)
	}
}

// screenshot saves the page as NAME.png where screenshotsEnv says.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv(screenshotsEnv)
	if dir == "" {
		dir = filepath.Join("testdata", "screenshots")
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(dir, name+".png")
	if err = os.MkdirAll(dir, 0o755); err == nil {
		err = os.WriteFile(path, png, 0o644)
	}
	if err != nil {
		t.Logf("screenshot %s: %v", path, err)
		return
	}
	t.Logf("screenshot: %s", path)
}

// void runs a, and forgets its value.
func void[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, t)
		return chromedp.Void{}, err
	}
}

// chartDrawn is true once the first chart has at least two points of its
// first series and has drawn them: pixels of that series' colour.
const chartDrawn = `(() => {
  const c = window.redsemCharts || [];
  if (c.length < 4 || c[0].data[1].filter(v => v != null).length < 2) return false;
  const cv = document.querySelector('[data-chart="use"] canvas');
  const px = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
  let n = 0;
  for (let i = 0; i < px.length; i += 4) if (px[i] === 37 && px[i+1] === 99 && px[i+2] === 235) n++;
  return n > 20;
})()`

// In a real browser: a name another process acquires shows on the
// overview within 2s; its page lists the holder and draws the charts; a
// holder that releases disappears; releasing a lease from the page
// removes it in Redis and its holder learns of the loss.
func TestBrowserLive(t *testing.T) {
	ctx := newBrowser(t)
	f := newFixture(t, dashboard.Actions(testToken))
	const name = "browser jobs {x}"
	run(t, ctx, 10*time.Second, "open the overview", chromedp.Navigate(f.http.URL+"/"), chromedp.WaitVisible(chromedp.CSS("table.names")))

	seven := startHolder(t, f.srv.Addr(), name, "worker-7")
	held := time.Now()
	run(t, ctx, 2*time.Second, "the name on the overview within 2s of its acquisition",
		chromedp.WaitVisible(chromedp.CSS(`tr[data-name="browser jobs {x}"]`)))
	t.Logf("listed %v after another process acquired it", time.Since(held).Round(time.Millisecond))
	eight := startHolder(t, f.srv.Addr(), name, "worker-8")
	screenshot(t, ctx, "overview")

	run(t, ctx, 10*time.Second, "the name's page, its holders and a drawn chart",
		chromedp.Evaluate[chromedp.Void](`document.querySelector('tr[data-name="browser jobs {x}"] a').click()`),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="worker-7"]`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-id="worker-8"]`)),
		void(chromedp.Poll[bool](chartDrawn, chromedp.WithPollingTimeout(8*time.Second))))

	eight.stop() // releases
	run(t, ctx, 5*time.Second, "a released holder leaves the page", chromedp.WaitNotPresent(chromedp.CSS(`tr[data-id="worker-8"]`)))
	screenshot(t, ctx, "name")

	run(t, ctx, 10*time.Second, "release worker-7 from the page",
		chromedp.SendKeys(chromedp.CSS("#token"), testToken),
		chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`), // what the operator answers
		// A click in the page itself: the live part is redrawn every
		// interval, and a node chromedp found may be gone by its click.
		chromedp.WaitVisible(chromedp.CSS(`button.release[data-id="worker-7"]`)),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('button.release[data-id="worker-7"]').click()`),
		chromedp.WaitVisible(chromedp.CSS("#status.ok")),
		chromedp.WaitNotPresent(chromedp.CSS(`tr[data-id="worker-7"]`)))
	if hs, err := inspect.New(f.app).Holders(f.ctx, name); err != nil || len(hs) != 0 {
		t.Errorf("after the release Redis lists %+v (%v)", hs, err)
	}
	if line, err := seven.next(2 * holderTTL); err != nil || !strings.Contains(line, limiter.ErrLeaseLost.Error()) {
		t.Errorf("the holder process said %q (%v), want that it lost its lease", line, err)
	}
}

// In a real browser, without Actions the pages show no control and no
// token field.
func TestBrowserReadOnly(t *testing.T) {
	ctx := newBrowser(t)
	f := newFixture(t)
	f.hold(t, f.sem(t, "jobs", 2), "worker-1", 1)
	for _, path := range []string{"/", "/name?name=jobs"} {
		run(t, ctx, 10*time.Second, "open "+path, chromedp.Navigate(f.http.URL+path),
			chromedp.WaitVisible(chromedp.CSS(`[data-name="jobs"], tr[data-id="worker-1"]`)))
		controls, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('.action, #token, button.release, form[method=post]').length`))
		if err != nil {
			t.Fatal(err)
		}
		if controls != 0 {
			screenshot(t, ctx, "read-only-controls")
			t.Errorf("%s shows %d action controls with actions off", path, controls)
		}
	}
}

// In a real browser, the live part is updated in place: a selection in
// a cell that did not change and the scroll stay, and the cells that
// change (the holders' ages) are updated.
func TestBrowserKeepsSelection(t *testing.T) {
	ctx := newBrowser(t)
	f := newFixture(t)
	s := f.sem(t, "big", 500)
	for i := range 120 {
		f.hold(t, s, fmt.Sprintf("worker-%03d", i), 1)
	}
	run(t, ctx, 10*time.Second, "open", chromedp.Navigate(f.http.URL+"/name?name=big"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="worker-119"]`)))
	run(t, ctx, 5*time.Second, "select a cell, scroll", chromedp.Evaluate[chromedp.Void](`
		window.scrollTo(0, 2500);
		const td = document.querySelector('tr[data-id="worker-100"] td');
		const r = document.createRange(); r.selectNodeContents(td);
		getSelection().removeAllRanges(); getSelection().addRange(r);
		window.before = [window.scrollY, getSelection().toString(), document.querySelector('p.sampled').textContent];
	`))
	time.Sleep(15 * testInterval)
	out, err := chromedp.Run(ctx, chromedp.Evaluate[[]any](`[window.before, [window.scrollY, getSelection().toString(), document.querySelector('p.sampled').textContent]]`))
	if err != nil {
		t.Fatal(err)
	}
	before, after := out[0].([]any), out[1].([]any)
	if before[0] != after[0] || before[1] != "worker-100" || after[1] != "worker-100" || before[2] == after[2] {
		t.Errorf("before 15 intervals [scroll, selection, sampled]: %v; after: %v", before, after)
	}
	// The overview does not change (no ages on it): 304s, and the sample
	// time moves on.
	run(t, ctx, 10*time.Second, "the overview", chromedp.Navigate(f.http.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-name="big"]`)))
	at := func() string {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('p.sampled time').textContent`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := at()
	time.Sleep(15 * testInterval)
	if later := at(); later == first {
		t.Errorf("the overview's sample time stays %s", first)
	}
}

// textIs waits until the element sel's text is want.
func textIs(sel, want string) chromedp.Action[chromedp.Void] {
	js := fmt.Sprintf(`(document.querySelector(%q) || {}).textContent === %q`, sel, want)
	return void(chromedp.Poll[bool](js, chromedp.WithPollingTimeout(5*time.Second)))
}

// In a real browser: a name whose limit and rate live only in the
// processes' code shows them on the overview ("1 of 5", "18/1s burst 1")
// and on its page, and where processes disagree, each value with how
// many processes apply it (issue 32).
func TestBrowserLimitsInUse(t *testing.T) {
	ctx := newBrowser(t)
	f := newFixture(t)
	const name = "partner-api"
	f.hold(t, f.sem(t, name, 5), "worker-1", 1)
	rl, err := f.app.RateLimit(name, limiter.Rate{Events: 18, Per: time.Second, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rl.Allow(f.ctx); err != nil {
		t.Fatal(err)
	}
	row := `tr[data-name="partner-api"] `
	run(t, ctx, 10*time.Second, "the overview shows the limit and rate in use", chromedp.Navigate(f.http.URL+"/"),
		textIs(row+"td.limit", "5"), textIs(row+"td.in-use", "1 of 5 "), textIs(row+"td.rate", "18/1s burst 1"))
	screenshot(t, ctx, "overview-in-use")
	run(t, ctx, 10*time.Second, "the name's page shows them", chromedp.Navigate(f.http.URL+"/name?name="+name),
		textIs("dd.limit", "the processes' own: 5 (1 proc)"), textIs("dd.in-use", "1 of 5"),
		textIs("dd.rate", "the processes' own: 18/1s burst 1 (1 proc)"))

	// Another process (a Client of its own) applies 4.
	other := redistest.Limiter(t, f.srv.Client(t), limiter.Prefix(testPrefix))
	s, err := other.Semaphore(name, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(f.ctx); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, 10*time.Second, "the page shows the processes disagree",
		textIs("dd.limit", "the processes' own: 5 (1 proc), 4 (1 proc)"), textIs("dd.in-use", "2"))
	screenshot(t, ctx, "name-in-use")
	run(t, ctx, 10*time.Second, "and so does the overview", chromedp.Navigate(f.http.URL+"/"),
		textIs(row+"td.limit", "5 (1 proc), 4 (1 proc)"))
}

// In a real browser: the wait queue says why each waiter waits and when
// it should be granted: "full" with the waiters ahead and an estimated
// ETA, then, once the name is paused, "paused" with the pause's end
// (issue 32).
func TestBrowserWaitQueueSaysWhy(t *testing.T) {
	ctx := newBrowser(t)
	f := newFixture(t)
	const name = "why-queue"
	s := f.sem(t, name, 1, limiter.AcquireTimeout(0))
	f.hold(t, s, "worker-1", 1)
	f.queue(t, s, 1)
	f.queue(t, s, 1)
	first, second := `table.waiters tbody tr:nth-child(1) `, `table.waiters tbody tr:nth-child(2) `
	estimated := func(sel string) chromedp.Action[chromedp.Void] {
		js := fmt.Sprintf(`((document.querySelector(%q) || {}).textContent || "").startsWith("~")`, sel)
		return void(chromedp.Poll[bool](js, chromedp.WithPollingTimeout(5*time.Second)))
	}
	run(t, ctx, 10*time.Second, "the queue says full, with the waiters ahead", chromedp.Navigate(f.http.URL+"/name?name="+name),
		textIs(first+"td.why", "full, 0 ahead"), textIs(second+"td.why", "full, 1 ahead"),
		estimated(first+"td.eta"), estimated(second+"td.eta"))
	screenshot(t, ctx, "queue-why")
	if _, err := inspect.New(f.app).Pause(f.ctx, name, time.Hour); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, 10*time.Second, "a pause says paused, until its end", textIs(first+"td.why", "paused"),
		textIs(second+"td.why", "paused"), void(chromedp.Poll[bool](
			fmt.Sprintf(`/^(1h0m|59m)/.test((document.querySelector(%q) || {}).textContent || "")`, first+"td.eta"),
			chromedp.WithPollingTimeout(5*time.Second))))
}
