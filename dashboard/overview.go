package dashboard

import (
	"cmp"
	"context"
	"net/http"
	"net/url"
	"slices"

	"github.com/redsem/redsem/internal/namestate"
)

// row is a name in the overview.
type row struct {
	Name         string          `json:"name"`
	Semaphore    bool            `json:"semaphore"`
	FleetLimit   *int64          `json:"fleet_limit"`
	InUse        int64           `json:"in_use"`
	Holders      int             `json:"holders"`
	Waiters      int             `json:"waiters"`
	OldestWaitMs int64           `json:"oldest_wait_ms"`
	Rate         *namestate.Rate `json:"rate"`
	Saturated    bool            `json:"saturated"`
	fill         float64
}

// overview is the overview's JSON.
type overview struct {
	*snapshot
	Names []row `json:"names"`
}

func rowOf(v nameView) row {
	return row{Name: v.Name, Semaphore: v.Semaphore, FleetLimit: v.FleetLimit, InUse: v.InUse, Holders: len(v.Holders),
		Waiters: len(v.Waiters), OldestWaitMs: v.OldestWaitMs, Rate: v.Rate, Saturated: v.Saturated, fill: v.fill()}
}

// rows are the names of snap that match the glob match ("": all), in
// the order by says: "name", or by saturation (saturated first, then the
// fullest, the most waiters, the longest wait, by name). The glob is
// Redis's, as ls reads it: the names are asked of Redis, where a SCAN
// bounds the cost.
func (d *Dashboard) rows(ctx context.Context, snap *snapshot, match, by string) ([]row, error) {
	keep, err := d.matching(ctx, match)
	if err != nil {
		return []row{}, err
	}
	rows := make([]row, 0, len(snap.Names))
	for _, v := range snap.Names {
		if keep == nil || keep[v.Name] {
			rows = append(rows, rowOf(v))
		}
	}
	if by != "name" {
		slices.SortStableFunc(rows, bySaturation)
	}
	return rows, nil
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

// matching is the set of names that match, or nil for all.
func (d *Dashboard) matching(ctx context.Context, match string) (map[string]bool, error) {
	if match == "" {
		return nil, nil
	}
	in := d.c.Inspector()
	sems, err := in.Names(ctx, match)
	if err != nil {
		return nil, err
	}
	rates, err := in.RateNames(ctx, match)
	if err != nil {
		return nil, err
	}
	keep := make(map[string]bool, len(sems)+len(rates))
	for _, n := range append(sems, rates...) {
		keep[n] = true
	}
	return keep, nil
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
	rows, err := d.rows(r.Context(), snap, p.Match, p.Sort)
	p.Rows = rows
	if err != nil {
		p.FilterErr = "cannot filter by " + p.Match + ": " + err.Error()
	}
	p.LiveSrc = liveSrc("./", url.Values{"match": {p.Match}, "sort": {p.Sort}})
	render(w, r, "overview", p)
}

func (d *Dashboard) overviewJSON(w http.ResponseWriter, r *http.Request) {
	snap := d.s.current(r.Context())
	q := r.URL.Query()
	rows, err := d.rows(r.Context(), snap, q.Get("match"), sortOf(q))
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	writeJSON(w, http.StatusOK, overview{snapshot: snap, Names: rows})
}
