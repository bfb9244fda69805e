package store

import (
	"math"
	"testing"
)

// luaStretch is pause.lua's stretch as Redis's Lua computes it: every
// operation rounded to a double on its own (the VM never fuses).
func luaStretch(n PauseNotice, t int64) int64 {
	to := t + n.Moved
	if n.Scale > 1 && to > n.End {
		p := float64(float64(to-n.End) * n.Scale) // rounded: no fused multiply-add
		return int64(math.Ceil(float64(n.End) + p))
	}
	return to
}

// Guards against what an adversarial review found: Stretch's float64(End) + float64(to-End)*Scale may be fused
// into one multiply-add by the Go compiler (always on arm64, on amd64
// with GOAMD64=v3), which Redis's Lua never does: the times then differ
// from pause.lua's by a µs, either way. Run with GOAMD64=v3 on amd64.
func TestStretchMatchesLua(t *testing.T) {
	n := PauseNotice{End: 1764670000123457, Moved: 0, Scale: 25.0 / 24} // 25/s cut to its min of 24/s
	bad := 0
	for d := int64(1); d < 2_000_000 && bad < 3; d++ {
		if g, l := n.Stretch(n.End+d), luaStretch(n, n.End+d); g != l {
			t.Errorf("Stretch(End+%d) = End+%d, pause.lua's End+%d", d, g-n.End, l-n.End)
			bad++
		}
	}
}
