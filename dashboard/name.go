package dashboard

import (
	"cmp"
	"errors"
	"math"
	"net/http"
	"net/url"
	"slices"
	"time"
)

// errNoName answers a name page asked for without a name.
var errNoName = errors.New("dashboard: the name parameter is missing")

// view finds name in snap, or nil.
func view(snap *snapshot, name string) *nameView {
	i, ok := slices.BinarySearchFunc(snap.Names, name, func(v nameView, n string) int { return cmp.Compare(v.Name, n) })
	if !ok {
		return nil
	}
	return &snap.Names[i]
}

// lookup finds name in snap; when it is not there, the next samples read
// it too, for a name new since the sampler last listed the names.
func (d *Dashboard) lookup(snap *snapshot, name string) *nameView {
	v := view(snap, name)
	if v == nil && !snap.beyondMax(name) {
		d.s.want(name)
	}
	return v
}

func (d *Dashboard) namePage(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if name == "" {
		http.Error(w, errNoName.Error(), http.StatusBadRequest)
		return
	}
	snap := d.s.current(r.Context())
	p := d.newPage(name, snap)
	p.Name, p.View, p.Charts = name, d.lookup(snap, name), true
	p.BeyondMax = p.View == nil && snap.beyondMax(name)
	p.LiveSrc = liveSrc("name", url.Values{"name": {name}})
	p.HistorySrc = "api/history?" + url.Values{"name": {name}}.Encode()
	p.Learning = learning(d.s.history(name))
	render(w, r, "name", p)
}

// nameJSON is a name's JSON: null view when Redis holds nothing for it.
type nameJSON struct {
	SampledAt time.Time `json:"sampled_at"`
	*nameView
	Name string `json:"name"`
	// BeyondMax: the name is one that MaxNames leaves out (not sampled).
	BeyondMax bool `json:"beyond_max_names,omitempty"`
}

func (d *Dashboard) nameData(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if name == "" {
		writeError(w, http.StatusBadRequest, errNoName)
		return
	}
	snap := d.s.current(r.Context())
	v := d.lookup(snap, name)
	status := http.StatusOK
	if v == nil {
		status = http.StatusNotFound
	}
	writeJSON(w, status, nameJSON{SampledAt: snap.At, nameView: v, Name: name, BeyondMax: v == nil && snap.beyondMax(name)})
}

func (d *Dashboard) historyData(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if name == "" {
		writeError(w, http.StatusBadRequest, errNoName)
		return
	}
	writeJSON(w, http.StatusOK, seriesOf(d.s.history(name)))
}

// learning says whether a name's points chart a learned limit or rate:
// the page then draws that chart (it shows from one sample on).
func learning(ps []point) bool {
	for _, p := range ps {
		if !math.IsNaN(float64(p.learnedLimit)) || !math.IsNaN(float64(p.learnedRate)) {
			return true
		}
	}
	return false
}
