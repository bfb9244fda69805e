package dashboard

import (
	"encoding/json"
	"math"
	"time"
)

// point is one sample of a name, for the charts: float32 keeps 15
// minutes of a name at one sample a second in about 20 KB. NaN is "not
// known" (a limit that is not set, grants before the second sample).
type point struct {
	at         int64 // Unix seconds × 1000 (ms)
	inUse      float32
	limit      float32
	waiters    float32
	grants     float32 // per second, since the sample before
	oldestWait float32 // seconds
}

// history is a name's last points, a ring that overwrites the oldest.
type history struct {
	points []point
	next   int // where the next point goes
	full   bool
	seen   time.Time // when the name last had state in Redis
}

func newHistory(capacity int) *history {
	return &history{points: make([]point, capacity)}
}

func (h *history) add(p point) {
	h.points[h.next] = p
	h.next++
	if h.next == len(h.points) {
		h.next, h.full = 0, true
	}
}

// ordered returns the points oldest first.
func (h *history) ordered() []point {
	if !h.full {
		return append([]point(nil), h.points[:h.next]...)
	}
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
