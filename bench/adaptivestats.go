package main

// The adaptive bench's figures, per variant and phase, from the
// upstream's 100 ms samples (what it served, not what the clients think
// they did) and the workers' learned values.

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The figures' thresholds (issue 33's goals).
const (
	reachShare     = 0.9              // ">= 90 % of the hidden limits"
	settleBand     = 0.1              // "within 10 %"
	reachHold      = 2 * time.Second  // a figure counts once it held this long
	steadyTail     = 10 * time.Second // the steady state: a phase's last 10 s (at most its half)
	bandLo, bandHi = 0.05, 0.95
)

// phaseStats are one run's figures in one phase.
type phaseStats struct {
	Reach      float64 // s from the phase's start to on target and held (+Inf: never)
	ReachL     float64 // the same for the learned values (NaN: none)
	TooManyPct float64 // 429s, % of the calls in the steady state
	InFlight   [2]float64
	Rate       [2]float64 // accepted calls/s, 1 s windows, ÷ R
	LearnedC   [2]float64 // NaN without learned values
	LearnedR   [2]float64
	Accepted   float64 // calls served in the phase
	Goodput    float64 // served/s ÷ min(R, C/mean latency)
	Oracle     float64 // Accepted ÷ the oracle's (NaN without one)
	// Settled: served calls from Reach to the phase's end ÷ the oracle's
	// over the same span (NaN without one, or never on target): goodput
	// once converged, where Oracle counts the ramp against the phase.
	Settled float64
}

// phaseSpan is a phase's [start, end) after "go".
func phaseSpan(phases []adaptivePhase, k int) (time.Duration, time.Duration) {
	var start time.Duration
	for _, ph := range phases[:k] {
		start += ph.Dur
	}
	return start, start + phases[k].Dur
}

// firstAt is the index of the first sample at or after t (len(s) if none).
func firstAt(s []apiSample, t time.Duration) int {
	i, _ := slices.BinarySearchFunc(s, t, func(a apiSample, t time.Duration) int { return int(a.At - t) })
	return i
}

// use is the share of the hidden limits served between samples a and b:
// the larger of the mean in-flight ÷ C and the served rate ÷ R (whichever
// binds), and the share of arrivals refused.
func use(s []apiSample, a, b int, ph adaptivePhase) (u, refused float64) {
	var sum int64
	for _, x := range s[a:b] {
		sum += x.InFlight
	}
	secs := (s[b].At - s[a].At).Seconds()
	conc := float64(sum) / float64(b-a) / float64(ph.Limit)
	rate := float64(s[b].Accepted-s[a].Accepted) / secs / float64(ph.Rate)
	if arr := s[b].Arrived - s[a].Arrived; arr > 0 {
		refused = float64(s[b].Rejected-s[a].Rejected) / float64(arr)
	}
	return math.Max(conc, rate), refused
}

// onTarget: up, at >= 90 % of the limits; down, within 10 % of them with
// at most 10 % of the calls refused.
func onTarget(s []apiSample, a, b int, ph adaptivePhase) bool {
	u, refused := use(s, a, b, ph)
	if ph.Up {
		return u >= reachShare
	}
	return u >= 1-settleBand && u <= 1+settleBand && refused <= settleBand
}

// reach is the time from start to the first 1 s window on target that
// the next one confirms.
func reach(s []apiSample, start, end time.Duration, ph adaptivePhase) float64 {
	for i := firstAt(s, start); i < len(s); i++ {
		j := firstAt(s, s[i].At+time.Second)
		k := firstAt(s, s[i].At+reachHold)
		if k >= len(s) || s[k].At > end {
			break
		}
		if onTarget(s, i, j, ph) && onTarget(s, j, k, ph) {
			return (s[i].At - start).Seconds()
		}
	}
	return math.Inf(1)
}

func band(xs []float64) [2]float64 {
	if len(xs) == 0 {
		return [2]float64{math.NaN(), math.NaN()}
	}
	slices.Sort(xs)
	q := func(p float64) float64 { return xs[min(int(p*float64(len(xs))), len(xs)-1)] }
	return [2]float64{q(bandLo), q(bandHi)}
}

// stats computes the figures of phase k of r.
func (r adaptiveRun) stats(k int, meanLat time.Duration) phaseStats {
	ph := r.Phases[k]
	start, end := phaseSpan(r.Phases, k)
	s := r.Samples
	var st phaseStats
	st.Reach = reach(s, start, end, ph)
	st.ReachL = r.reachLearned(start, end, ph)
	a, b := firstAt(s, start), min(firstAt(s, end), len(s)-1)
	st.Accepted = float64(s[b].Accepted - s[a].Accepted)
	bound := math.Min(float64(ph.Rate), float64(ph.Limit)/meanLat.Seconds())
	st.Goodput = st.Accepted / (s[b].At - s[a].At).Seconds() / bound
	st.Oracle, st.Settled = math.NaN(), math.NaN()

	tail := min(steadyTail, ph.Dur/2)
	sa := firstAt(s, end-tail)
	if arr := s[b].Arrived - s[sa].Arrived; arr > 0 {
		st.TooManyPct = 100 * float64(s[b].Rejected-s[sa].Rejected) / float64(arr)
	}
	var inf, rate []float64
	for i := sa; i <= b; i++ {
		inf = append(inf, float64(s[i].InFlight)/float64(ph.Limit))
		if j := firstAt(s, s[i].At+time.Second); j <= b {
			rate = append(rate, float64(s[j].Accepted-s[i].Accepted)/(s[j].At-s[i].At).Seconds()/float64(ph.Rate))
		}
	}
	st.InFlight, st.Rate = band(inf), band(rate)
	lc, lr := r.learnedIn(end-tail, end)
	for i := range lc {
		lc[i] /= float64(ph.Limit)
		lr[i] /= float64(ph.Rate)
	}
	st.LearnedC, st.LearnedR = band(lc), band(lr)
	return st
}

// served is the calls the upstream served between from and to.
func (r adaptiveRun) served(from, to time.Duration) float64 {
	s := r.Samples
	a, b := firstAt(s, from), min(firstAt(s, to), len(s)-1)
	if a >= b {
		return 0
	}
	return float64(s[b].Accepted - s[a].Accepted)
}

// learnedPoint is the fleet's learned limit and rate (the processes'
// values summed) in one 100 ms bucket.
type learnedPoint struct {
	At   time.Duration
	L, R float64
}

// learnedSeries is the fleet's learned values between from and to, in
// order, in the 100 ms buckets where every process sampled (its last
// sample there).
func (r adaptiveRun) learnedSeries(from, to time.Duration) []learnedPoint {
	if len(r.Learned) == 0 {
		return nil
	}
	per := make([]map[time.Duration]learnedSample, len(r.Learned))
	for i, proc := range r.Learned {
		per[i] = map[time.Duration]learnedSample{}
		for _, x := range proc {
			if at := time.Duration(x.Ms) * time.Millisecond; at >= from && at < to {
				per[i][at/sampleEvery*sampleEvery] = x
			}
		}
	}
	var out []learnedPoint
	for at := range per[0] {
		p := learnedPoint{At: at}
		for _, m := range per {
			x, ok := m[at]
			if !ok {
				p.At = -1
				break
			}
			p.L, p.R = p.L+x.Limit, p.R+x.Rate
		}
		if p.At >= 0 {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b learnedPoint) int { return int(a.At - b.At) })
	return out
}

// learnedIn is learnedSeries as two lists of values.
func (r adaptiveRun) learnedIn(from, to time.Duration) (limits, rates []float64) {
	for _, p := range r.learnedSeries(from, to) {
		limits, rates = append(limits, p.L), append(rates, p.R)
	}
	return limits, rates
}

// reachLearned is the time from start until the learned limit and rate
// are both on target (up: >= 90 %; down: within 10 %) and stay there for
// reachHold; NaN for a variant that learns nothing.
func (r adaptiveRun) reachLearned(start, end time.Duration, ph adaptivePhase) float64 {
	ps := r.learnedSeries(start, end)
	if len(ps) == 0 {
		return math.NaN()
	}
	ok := func(p learnedPoint) bool {
		l, rt := p.L/float64(ph.Limit), p.R/float64(ph.Rate)
		if ph.Up {
			return l >= reachShare && rt >= reachShare
		}
		return math.Abs(l-1) <= settleBand && math.Abs(rt-1) <= settleBand
	}
	since := time.Duration(-1)
	for _, p := range ps {
		switch {
		case !ok(p):
			since = -1
		case since < 0:
			since = p.At
		}
		if since >= 0 && p.At-since >= reachHold {
			return (since - start).Seconds()
		}
	}
	return math.Inf(1)
}

// adaptiveRow is a variant's figures in a phase, medians over rounds.
type adaptiveRow struct {
	Variant string
	Phase   adaptivePhase
	Rounds  []phaseStats
}

// median of one figure over the rounds (NaNs left out).
func (row adaptiveRow) median(f func(phaseStats) float64) float64 {
	var xs []float64
	for _, st := range row.Rounds {
		if x := f(st); !math.IsNaN(x) {
			xs = append(xs, x)
		}
	}
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// adaptiveRows gathers the runs' stats by variant and phase, with each
// run's served calls over the oracle's of the same round.
func adaptiveRows(runs []adaptiveRun, o adaptiveOptions) []adaptiveRow {
	oracle := map[[2]int]float64{} // round, phase -> accepted
	oracleRun := map[int]adaptiveRun{}
	for _, r := range runs {
		if r.Variant == variantOracle {
			oracleRun[r.Round] = r
			for k := range r.Phases {
				oracle[[2]int{r.Round, k}] = r.stats(k, o.meanLatency()).Accepted
			}
		}
	}
	var rows []adaptiveRow
	idx := map[string]int{}
	for _, r := range runs {
		for k, ph := range r.Phases {
			key := r.Variant + "\x00" + ph.Name
			if _, ok := idx[key]; !ok {
				idx[key] = len(rows)
				rows = append(rows, adaptiveRow{Variant: r.Variant, Phase: ph})
			}
			st := r.stats(k, o.meanLatency())
			if acc, ok := oracle[[2]int{r.Round, k}]; ok && acc > 0 {
				st.Oracle = st.Accepted / acc
			}
			if orc, ok := oracleRun[r.Round]; ok && !math.IsInf(st.Reach, 1) {
				start, end := phaseSpan(r.Phases, k)
				from := start + time.Duration(st.Reach*float64(time.Second))
				if acc := orc.served(from, end); acc > 0 {
					st.Settled = r.served(from, end) / acc
				}
			}
			rows[idx[key]].Rounds = append(rows[idx[key]].Rounds, st)
		}
	}
	slices.SortStableFunc(rows, func(a, b adaptiveRow) int { return variantOrder(a.Variant) - variantOrder(b.Variant) })
	return rows
}

func variantOrder(name string) int {
	return slices.IndexFunc(adaptiveVariants, func(v adaptiveVariant) bool { return v.Name == name })
}

func printAdaptive(out io.Writer, runs []adaptiveRun, o adaptiveOptions) {
	fmt.Fprintln(out, "| variant | phase | hidden C, R | to target s | learned to target s | 429s % (steady) | in flight ÷ C p5–p95 | served/s ÷ R p5–p95 | learned ÷ C p5–p95 | learned ÷ R p5–p95 | goodput ÷ bound | ÷ oracle | ÷ oracle from target |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, row := range adaptiveRows(runs, o) {
		m := row.median
		goal := "≥90 %"
		if !row.Phase.Up {
			goal = "±10 %"
		}
		fmt.Fprintf(out, "| %s | %s | %d, %d/s | %s (%s) | %s | %.1f | %s | %s | %s | %s | %.2f | %s | %s |\n",
			row.Variant, row.Phase.Name, row.Phase.Limit, row.Phase.Rate,
			secs(m(func(s phaseStats) float64 { return s.Reach })), goal,
			secs(m(func(s phaseStats) float64 { return s.ReachL })),
			m(func(s phaseStats) float64 { return s.TooManyPct }),
			bandOf(row, func(s phaseStats) [2]float64 { return s.InFlight }),
			bandOf(row, func(s phaseStats) [2]float64 { return s.Rate }),
			bandOf(row, func(s phaseStats) [2]float64 { return s.LearnedC }),
			bandOf(row, func(s phaseStats) [2]float64 { return s.LearnedR }),
			m(func(s phaseStats) float64 { return s.Goodput }),
			num(m(func(s phaseStats) float64 { return s.Oracle })),
			num(m(func(s phaseStats) float64 { return s.Settled })))
	}
	fmt.Fprintln(out)
	printAdaptiveCosts(out, runs)
	printAdaptiveNotes(out, o)
}

func bandOf(row adaptiveRow, f func(phaseStats) [2]float64) string {
	lo := row.median(func(s phaseStats) float64 { return f(s)[0] })
	hi := row.median(func(s phaseStats) float64 { return f(s)[1] })
	if math.IsNaN(lo) {
		return "–"
	}
	return fmt.Sprintf("%.2f–%.2f", lo, hi)
}

func secs(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	if math.IsInf(x, 1) {
		return "never"
	}
	return fmt.Sprintf("%.1f", x)
}

func num(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.2f", x)
}

// printAdaptiveCosts prints each run's totals: calls, 429s, errors and
// what Redis did per call.
func printAdaptiveCosts(out io.Writer, runs []adaptiveRun) {
	fmt.Fprintln(out, "| variant | round | calls | served | 429s | errors | Redis cmds sent / call | Redis CPU µs / call | load before→after |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range runs {
		var calls, ok, tm, errs, sent int64
		var first []string
		for _, rep := range r.Reports {
			calls, ok, tm, errs, sent = calls+rep.Calls, ok+rep.OK, tm+rep.TooMany, errs+rep.Errors, sent+rep.Sent
			if rep.FirstErr != "" && len(first) == 0 {
				first = append(first, rep.FirstErr)
			}
		}
		per := func(x int64) float64 { return float64(x) / math.Max(1, float64(calls)) }
		fmt.Fprintf(out, "| %s | %d | %d | %d | %d | %d | %.2f | %.0f | %.1f→%.1f |\n",
			r.Variant, r.Round, calls, ok, tm, errs, per(sent), per(r.Redis.CPUUsec), r.Load[0], r.Load[1])
		if len(first) > 0 {
			fmt.Fprintf(out, "|   first error: %s |||||||||\n", strings.ReplaceAll(first[0], "|", "/"))
		}
	}
	fmt.Fprintln(out)
}

func printAdaptiveNotes(out io.Writer, o adaptiveOptions) {
	fmt.Fprintf(out, `Columns: "to target": from the phase's start to the first 1 s window, confirmed by the
next, where the upstream served >= %.0f %% of a hidden limit (the larger of mean in-flight ÷ C
and served/s ÷ R: whichever binds; cold start, doubled), or where that share is within
±%.0f %% with <= %.0f %% of the calls refused (halved). Steady state: a phase's last %v (at most
its half). In flight: the upstream's count every 100 ms; served/s: 1 s windows every 100 ms;
learned: the processes' applied values summed (variants that learn); "learned to target":
the same thresholds on the learned limit and rate both, held 2 s. Goodput: served/s over
the phase ÷ min(R, C ÷ mean call %v); ÷ oracle: served calls over the oracle's, same round
and phase, the ramp counted against the phase; from target: the same from the variant's
"to target" to the phase's end (the oracle's calls over the same span). Medians over rounds
where more than one.
`, 100*reachShare, 100*settleBand, 100*settleBand, steadyTail, o.meanLatency())
}

// dumpAdaptive writes each run's 100 ms series as CSV into dir (for
// charts): the upstream's counts and the fleet's learned values.
func dumpAdaptive(dir string, runs []adaptiveRun) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, r := range runs {
		var b strings.Builder
		b.WriteString("ms,in_flight,arrived,accepted,rejected,hidden_limit,hidden_rate,learned_limit,learned_rate\n")
		for _, s := range r.Samples {
			lc, lr := r.learnedIn(s.At, s.At+sampleEvery)
			l, rt := "", ""
			if len(lc) > 0 {
				l, rt = fmt.Sprintf("%.1f", lc[0]), fmt.Sprintf("%.1f", lr[0])
			}
			fmt.Fprintf(&b, "%d,%d,%d,%d,%d,%d,%d,%s,%s\n", s.At.Milliseconds(), s.InFlight, s.Arrived,
				s.Accepted, s.Rejected, s.Limit, s.Rate, l, rt)
		}
		name := fmt.Sprintf("%s-r%d.csv", strings.ReplaceAll(r.Variant, " ", "-"), r.Round)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}
