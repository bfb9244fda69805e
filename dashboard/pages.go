package dashboard

import (
	"bytes"
	"embed"
	"fmt"
	"hash/fnv"
	"html/template"
	"net/http"
	"net/url"
	"time"

	"github.com/redsem/redsem/internal/namestate"
)

//go:embed templates/*.html
var templateFiles embed.FS

// pages are the HTML templates: each page, and the part of it that the
// page's script fetches again at every interval ("-live").
var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"dur":      durText,
	"limit":    limitText,
	"limits":   func(ls []namestate.LimitInUse) string { return namestate.LimitsText(ls, true) },
	"rates":    func(rs []namestate.RateInUse) string { return namestate.RatesText(rs, true) },
	"ownLimit": func(ls []namestate.LimitInUse) string { return namestate.LimitsText(ls, false) },
	"ownRate":  func(rs []namestate.RateInUse) string { return namestate.RatesText(rs, false) },
	"inUseOf": func(n int64, fleet *int64, ls []namestate.LimitInUse) string {
		if l := namestate.Effective(fleet, ls); l != nil {
			return fmt.Sprintf("%d of %d", n, *l)
		}
		return fmt.Sprint(n)
	},
	"rate":     (*namestate.RateJSON).Text,
	"nextFree": func(ms *int64) string { return namestate.NextFreeText(ms, durText) },
	"paused":   func(ms int64) string { return namestate.PausedText(ms, durText) },
	"why":      namestate.ReasonText,
	"learned":  func(l *namestate.Learned) string { return namestate.LearnedText(l, durText) },
	"bounds":   func(l *namestate.Learned) string { return " (" + namestate.BoundsText(l) + ")" },
	"eta":      func(w namestate.Why) string { return namestate.ETAText(w, durText) },
	"inc":      func(i int) int { return i + 1 },
	"share":    func(n int64, f float64) float64 { return float64(n) * f },
}).ParseFS(templateFiles, "templates/*.html"))

// page is what every template reads.
type page struct {
	Title, Source string
	Interval      time.Duration
	IntervalMs    int64
	Keep          time.Duration
	Actions       bool
	Charts        bool
	Snap          *snapshot
	LiveSrc       string // the URL of the live part, relative

	// The overview's.
	Match, Sort string
	Rows        []row

	// A name's.
	Name       string
	View       *nameView // nil when Redis holds nothing for it
	BeyondMax  bool      // the name is one MaxNames leaves out
	HistorySrc string
	Learning   bool // its limit or rate is learned (or pinned): charted
}

func (d *Dashboard) newPage(title string, snap *snapshot) page {
	return page{Title: title, Source: d.cfg.source, Interval: d.cfg.interval, IntervalMs: d.cfg.interval.Milliseconds(),
		Keep: d.cfg.keep, Actions: d.cfg.actions, Snap: snap}
}

// render writes the template name, or its live part when the request
// asks for it (part=live), whole or not at all. The live part has an ETag
// of all but its sample time: when it matches If-None-Match the answer is
// 304 with the sample time alone (X-Redsem-Sampled), so that a page whose
// names did not change costs no HTML.
func render(w http.ResponseWriter, r *http.Request, name string, p page) {
	live := r.URL.Query().Get("part") == "live"
	if live {
		name += "-live"
	}
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, p); err != nil {
		http.Error(w, "dashboard: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	if live {
		tag := etagOf(b.Bytes())
		h.Set("ETag", tag)
		if !p.Snap.At.IsZero() {
			h.Set("X-Redsem-Sampled", p.Snap.At.Format("15:04:05"))
		}
		if r.Header.Get("If-None-Match") == tag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	h.Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// sampledAt opens the sample time in a live part (template "sampled").
var sampledAt = []byte(`<time class="at">`)

// etagOf is the ETag of a live part: a hash of it without its sample
// time.
func etagOf(html []byte) string {
	f := fnv.New64a()
	if i := bytes.Index(html, sampledAt); i >= 0 {
		f.Write(html[:i])
		if j := bytes.Index(html[i:], []byte("</time>")); j >= 0 {
			html = html[i+j:]
		}
	}
	f.Write(html)
	return fmt.Sprintf(`"%x"`, f.Sum64())
}

// liveSrc is the URL of a page's live part: its own query, and part=live.
func liveSrc(path string, q url.Values) string {
	q.Set("part", "live")
	return path + "?" + q.Encode()
}

// durText is ms as an operator reads it: 320ms, 12.3s, 4m5s.
func durText(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func limitText(l *int64) string {
	if l == nil {
		return "-"
	}
	return fmt.Sprint(*l)
}
