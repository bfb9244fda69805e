package dashboard_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// learnedMoved is true once the learned chart holds the learned rate at
// 5/s and, later, at 40/s, and has drawn it: pixels of its colour.
const learnedMoved = `(() => {
  const i = Array.from(document.querySelectorAll('[data-chart]')).findIndex(e => e.dataset.chart === 'learned');
  const c = (window.redsemCharts || [])[i];
  if (i < 0 || !c) return false;
  const vs = c.data[2].filter(v => v != null);
  if (vs.indexOf(5) < 0 || vs.lastIndexOf(40) < vs.indexOf(5)) return false;
  const cv = document.querySelector('[data-chart="learned"] canvas');
  const px = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
  let n = 0;
  for (let i = 0; i < px.length; i += 4) if (px[i] === 219 && px[i+1] === 39 && px[i+2] === 119) n++;
  return n > 20;
})()`

// In a real browser: a learned rate shows on the overview with its
// bounds, on its page with why it last moved, and its page charts the
// learned value moving: 5/s from its start, then 40/s once the upstream
// advertises that (issue 33).
func TestBrowserLearnedChart(t *testing.T) {
	ctx := newBrowser(t)
	f := newFixture(t)
	const name = "learned-api"
	rl, err := f.app.RateLimit(name, limiter.Rate{Events: 100, Per: time.Second, Burst: 1}, limiter.Adaptive(1, 5))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rl.Allow(f.ctx); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, 10*time.Second, "the overview shows the rate learned, with its bounds", chromedp.Navigate(f.http.URL+"/"),
		textIs(`tr[data-name="learned-api"] td.rate`, "5/1s burst 1 (learned 1..100)"))
	run(t, ctx, 10*time.Second, "the name's page charts what it learned", chromedp.Navigate(f.http.URL+"/name?name="+name),
		chromedp.WaitVisible(chromedp.CSS(`[data-chart="learned"]`)), chromedp.WaitVisible(chromedp.CSS("dd.learned-rate")))
	time.Sleep(3 * testInterval) // a few points at 5/s
	if err := inspect.New(f.app).Advertise(f.ctx, name, limiter.Rate{Events: 40, Per: time.Second}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, 10*time.Second, "the chart draws the learned rate moving from 5/s to 40/s",
		void(chromedp.Poll[bool](learnedMoved, chromedp.WithPollingTimeout(8*time.Second))),
		void(chromedp.Poll[bool](`/set to the advertised 40 /.test(document.querySelector("dd.learned-rate").textContent)`,
			chromedp.WithPollingTimeout(5*time.Second))))
	screenshot(t, ctx, "name-learned")
}
