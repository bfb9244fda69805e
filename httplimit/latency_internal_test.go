package httplimit

import (
	"testing"
	"time"
)

// A key's answers signal slow only when a run of them, lasting a
// baseline, is over the tolerance (the baseline starts from the
// warm-up's median): not during the warm-up, not for one
// slow answer, nor for a run that fits in a stall of the process, and
// not twice within latencyQuiet.
func TestLatencySignalsARunOfSlowAnswers(t *testing.T) {
	var l latency
	now := time.Now()
	step := func(took time.Duration) bool {
		now = now.Add(10 * time.Millisecond)
		return l.slow(took, 1.5, now)
	}
	for i := range latencyWarmup {
		took := 100 * time.Millisecond
		if i < 3 {
			took = 10 * time.Second // the first calls dial, on a loaded machine
		}
		if step(took) { // the warm-up: no baseline yet
			t.Fatalf("answer %d of the warm-up signalled", i)
		}
	}
	if l.base != 0.1 {
		t.Fatalf("baseline %vs after the warm-up, want its median, 0.1s", l.base)
	}
	for i := range 3 * latencyRun {
		took := 100 * time.Millisecond
		if i%latencyRun == 0 {
			took = time.Second // alone among fast ones
		}
		if step(took) {
			t.Fatalf("answer %d signalled: one slow answer among fast ones", i)
		}
	}
	for i := range latencyRun { // a stall: 5 slow answers within 50ms
		if step(time.Second) {
			t.Fatalf("answer %d of a 50ms run signalled, want a run lasting a baseline", i)
		}
	}
	n := 0
	for range 20 { // 200ms of slow answers: one signal
		if step(time.Second) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d signals over 200ms of slow answers, want 1 (one per %v)", n, latencyQuiet)
	}
	now = now.Add(latencyQuiet)
	for range latencyRun + 10 {
		if step(time.Second) {
			return
		}
	}
	t.Fatal("no signal after the quiet period")
}

// The baseline starts from the median of all latencyWarmup answers, each
// counted once.
func TestLatencyBaselineIsTheWarmUpsMedian(t *testing.T) {
	var l latency
	now := time.Now()
	for i := range latencyWarmup {
		l.slow(time.Duration(i+1)*10*time.Millisecond, 1.5, now)
	}
	if l.base != 0.06 {
		t.Fatalf("baseline %vs after answers of 10ms..100ms, want their median, 0.06s", l.base)
	}
}
