package dashboard

import (
	"encoding/json"
	"math"
	"time"
)

// point is one sample of a name, for the charts: 40 bytes, so that 15
// minutes of a name at one sample a second (901 points) take about 35 KB.
// NaN is "not known" (a limit that is not set, grants before the second
// sample, a gap while the name was gone).
type point struct {
	at         int64 // Unix seconds × 1000 (ms)
	inUse      float32
	limit      float32
	waiters    float32
	grants     float32 // per second, since the sample before
	oldestWait float32 // seconds
	// The learned limit (permits) and rate (per second), or the pinned
	// ones (limiter.Adaptive; NaN: not learned).
	learnedLimit, learnedRate float32
}

// gapPoint is a point where nothing is known (the name had no state, or
// its read failed): the charts break there.
func gapPoint(now time.Time) point {
	nan := float32(math.NaN())
	return point{at: now.UnixMilli(), inUse: nan, limit: nan, waiters: nan, grants: nan, oldestWait: nan, learnedLimit: nan, learnedRate: nan}
}

// history is a name's last points, a ring that overwrites the oldest
// once full: it grows as points come, so that a name seen for a few
// samples costs a few points.
type history struct {
	points []point
	next   int       // where the next point goes, once full
	seen   time.Time // when the name last had state in Redis
}

// add adds p, keeping at most capacity points.
func (h *history) add(p point, capacity int) {
	if len(h.points) < capacity {
		if len(h.points) == cap(h.points) {
			grown := make([]point, len(h.points), min(max(2*len(h.points), 16), capacity))
			copy(grown, h.points)
			h.points = grown
		}
		h.points = append(h.points, p)
		return
	}
	h.points[h.next] = p
	h.next = (h.next + 1) % len(h.points)
}

// last is the newest point (ok false: none).
func (h *history) last() (p point, ok bool) {
	if len(h.points) == 0 {
		return point{}, false
	}
	return h.points[(h.next+len(h.points)-1)%len(h.points)], true
}

// gapped says whether the newest point is a gap.
func (h *history) gapped() bool {
	p, ok := h.last()
	return ok && math.IsNaN(float64(p.inUse)) && math.IsNaN(float64(p.waiters))
}

// ordered returns the points oldest first.
func (h *history) ordered() []point {
	return append(append([]point(nil), h.points[h.next:]...), h.points[:h.next]...)
}

// series is a history in the columns uPlot draws: times in seconds, then
// one array per series, null where a value is not known.
type series struct {
	Time       []float64  `json:"time"`
	InUse      []nullable `json:"in_use"`
	Limit      []nullable `json:"limit"`
	Waiters    []nullable `json:"waiters"`
	Grants     []nullable `json:"grants_per_second"`
	OldestWait []nullable `json:"oldest_wait_seconds"`
	// The learned (or pinned) limit and rate, per second.
	LearnedLimit []nullable `json:"learned_limit"`
	LearnedRate  []nullable `json:"learned_rate_per_second"`
}

func seriesOf(ps []point) series {
	s := series{Time: make([]float64, len(ps))}
	for i, p := range ps {
		s.Time[i] = float64(p.at) / 1000
		s.InUse = append(s.InUse, nullable(p.inUse))
		s.Limit = append(s.Limit, nullable(p.limit))
		s.Waiters = append(s.Waiters, nullable(p.waiters))
		s.Grants = append(s.Grants, nullable(p.grants))
		s.OldestWait = append(s.OldestWait, nullable(p.oldestWait))
		s.LearnedLimit = append(s.LearnedLimit, nullable(p.learnedLimit))
		s.LearnedRate = append(s.LearnedRate, nullable(p.learnedRate))
	}
	return s
}

// nullable is a value in JSON, null when NaN.
type nullable float32

func (n nullable) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(n)) {
		return []byte("null"), nil
	}
	return json.Marshal(float32(n))
}
