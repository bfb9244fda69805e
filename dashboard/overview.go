package dashboard

import (
	"cmp"
	"github.com/redsem/redsem/internal/glob"
	"net/http"
	"net/url"
	"slices"

	"github.com/redsem/redsem/internal/namestate"
)

// row is a name in the overview.
type row struct {
	Name       string `json:"name"`
	Semaphore  bool   `json:"semaphore"`
	FleetLimit *int64 `json:"fleet_limit"`
	// Limit is the limit it runs at (nameView.limit); Limits and Rates
	// are its processes' own.
	Limit        *int64                 `json:"limit"`
	Limits       []namestate.LimitInUse `json:"limits"`
	Rates        []namestate.RateInUse  `json:"rates"`
	InUse        int64                  `json:"in_use"`
	Holders      int                    `json:"holders"`
	Waiters      int                    `json:"waiters"`
	OldestWaitMs int64                  `json:"oldest_wait_ms"`
	Learned      *namestate.Learned     `json:"learned"` // a learned limit's (nameView's)
	Rate         *namestate.Rate        `json:"rate"`
	Saturated    bool                   `json:"saturated"`
	Err          string                 `json:"error,omitempty"` // the name's read failed
	fill         float64
}

// overview is the overview's JSON.
type overview struct {
	*snapshot
	Names []row `json:"names"`
}

func rowOf(v nameView) row {
	return row{Name: v.Name, Semaphore: v.Semaphore, FleetLimit: v.FleetLimit, Limit: v.limit(), Limits: v.Limits, Rates: v.Rates, InUse: v.InUse, Holders: len(v.Holders),
		Waiters: len(v.Waiters), OldestWaitMs: v.OldestWaitMs, Learned: v.Learned, Rate: v.Rate, Saturated: v.Saturated, Err: v.Err, fill: v.fill()}
}

// rows are the names of snap that the glob match selects ("": all), in
// the order by says: "name", or by saturation (saturated first, then the
// fullest, the most waiters, the longest wait, by name). The glob is
// Redis's, as ls reads it, matched here against the sample's names: a
// filter asks nothing of Redis.
func rows(snap *snapshot, match, by string) []row {
	rows := make([]row, 0, len(snap.Names))
	for _, v := range snap.Names {
		if match == "" || glob.Match(match, v.Name) {
			rows = append(rows, rowOf(v))
		}
	}
	if by != "name" {
		slices.SortStableFunc(rows, bySaturation)
	}
	return rows
}

func bySaturation(a, b row) int {
	if a.Saturated != b.Saturated {
		if a.Saturated {
			return -1
		}
		return 1
	}
	return cmp.Or(cmp.Compare(b.fill, a.fill), cmp.Compare(b.Waiters, a.Waiters),
		cmp.Compare(b.OldestWaitMs, a.OldestWaitMs), cmp.Compare(a.Name, b.Name))
}

// sortOf is the sort a request asks for: "name" or "saturation".
func sortOf(q url.Values) string {
	if q.Get("sort") == "name" {
		return "name"
	}
	return "saturation"
}

func (d *Dashboard) overviewPage(w http.ResponseWriter, r *http.Request) {
	snap := d.s.current(r.Context())
	q := r.URL.Query()
	p := d.newPage("overview", snap)
	p.Match, p.Sort = q.Get("match"), sortOf(q)
	p.Rows = rows(snap, p.Match, p.Sort)
	p.LiveSrc = liveSrc("./", url.Values{"match": {p.Match}, "sort": {p.Sort}})
	render(w, r, "overview", p)
}

func (d *Dashboard) overviewJSON(w http.ResponseWriter, r *http.Request) {
	snap := d.s.current(r.Context())
	q := r.URL.Query()
	writeJSON(w, http.StatusOK, overview{snapshot: snap, Names: rows(snap, q.Get("match"), sortOf(q))})
}
