package main

// The rate tables: rounds alternating the libraries, medians, ratios to
// redis_rate, and the goals checked against redsem's numbers.

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// overWindow is the window of the over-the-limit count.
const overWindow = time.Second

// Goals for redsem's RateLimit (the issue's).
const (
	goalCalls    = 1.0              // round trips per granted event
	goalShare    = 1.1              // events of the most / least served process
	goalLateness = time.Millisecond // p99 lateness on loopback
	goalOver     = 0                // windows over the limit
)

const (
	refLib    = "redis_rate"       // the ratios' denominator
	redsemLib = "redsem RateLimit" // the row the goals are for
)

// allowRow is one library's uncontended rounds.
type allowRow struct {
	lib    Lib
	rounds []AllowResult
}

// rateRound is one round of the waiting scenario: the merged numbers
// and the schedule's.
type rateRound struct {
	MultiStats
	LateP50, LateP99, LateMax time.Duration
	FirstDelay                time.Duration // the first event after the run's start
	Over                      int           // overWindow windows over the limit
}

// rateRow is one library's rounds of RateScenario (RateScenarioOneProc).
type rateRow struct {
	lib    MultiLib
	sc     MultiScenario
	rounds []rateRound
}

// idleCPU is redis-server's CPU time over dur with no load (its cron,
// INFO): the floor under the per-event figures of a run that long.
func idleCPU(ctx context.Context, env *Env, dur time.Duration) (int64, error) {
	before, err := env.cpuUsec(ctx)
	if err != nil {
		return 0, err
	}
	time.Sleep(dur)
	after, err := env.cpuUsec(ctx)
	return after - before, err
}

// runRate runs both rate scenarios, rounds rounds each, the library that
// goes first rotating from round to round.
func runRate(ctx context.Context, env *Env, rounds, calls int, dur time.Duration) ([]allowRow, []rateRow, error) {
	allow := make([]allowRow, len(AllowLibs))
	multi := make([]rateRow, len(RateMultiLibs))
	for round := range rounds {
		for k := range AllowLibs {
			i := (k + round) % len(AllowLibs)
			r, err := RunAllow(ctx, env, AllowLibs[i], calls)
			if err != nil {
				return nil, nil, fmt.Errorf("uncontended Allow, %s, round %d: %w", AllowLibs[i].Name, round+1, err)
			}
			allow[i].lib = AllowLibs[i]
			allow[i].rounds = append(allow[i].rounds, r)
		}
		for k := range RateMultiLibs {
			i := (k + round) % len(RateMultiLibs)
			run, err := RunRateMulti(ctx, env, RateMultiLibs[i], MultiOpts{Duration: dur})
			if err != nil {
				return nil, nil, fmt.Errorf("%s, round %d: %w", RateMultiLibs[i].Name, round+1, err)
			}
			rr := rateRound{MultiStats: run.Analyze(), Over: run.OverWindows(waitRate, overWindow)}
			late := run.Lateness(waitRate)
			rr.LateP50, rr.LateP99, rr.LateMax = percentile(late, 50), percentile(late, 99), percentile(late, 100)
			rr.FirstDelay = run.FirstDelay()
			fmt.Fprintf(os.Stderr, "rate: %s, round %d: %d events, %.0f/s, %.2f calls/event, late p99 %.2f ms, %d windows over\n",
				RateMultiLibs[i].Name, round+1, rr.N, rr.AcqPerSec(), clientPerEvent(rr), msOf(rr.LateP99), rr.Over)
			multi[i].lib, multi[i].sc = RateMultiLibs[i], run.Scenario
			multi[i].rounds = append(multi[i].rounds, rr)
		}
	}
	return allow, multi, nil
}

func medianFloat(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func (r allowRow) median(f func(AllowResult) float64) float64 {
	v := make([]float64, len(r.rounds))
	for i, x := range r.rounds {
		v[i] = f(x)
	}
	return medianFloat(v)
}

func (r rateRow) median(f func(rateRound) float64) float64 {
	v := make([]float64, len(r.rounds))
	for i, x := range r.rounds {
		v[i] = f(x)
	}
	return medianFloat(v)
}

// clientPerEvent is the commands the clients sent (commandstats) per
// granted event: the round trips.
func clientPerEvent(r rateRound) float64 { return r.per(r.Counts.client) }

// rateCol is a column of a rate table: value is NaN where it does not
// apply (no Redis, one process).
type rateCol[T any] struct {
	name, format string
	value        func(lib string, x T) float64
}

// noRatio are the columns with no ratio to redis_rate (a count that must
// be 0).
var noRatio = map[string]bool{"1s windows over": true}

// fmtCell writes v by format, "-" for NaN (nothing measured) and "inf".
func fmtCell(format string, v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 1):
		return "inf"
	}
	return fmt.Sprintf(format, v)
}

// printRateTable prints rows (medians) and the ratio of every other row
// to refLib's.
func printRateTable[T any](out io.Writer, names []string, cols []rateCol[T], median func(i int, f func(T) float64) float64) [][]float64 {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "library\t")
	for _, c := range cols {
		fmt.Fprintf(tw, "%s\t", c.name)
	}
	fmt.Fprintln(tw)
	vals := make([][]float64, len(names))
	ref := -1
	for i, n := range names {
		if n == refLib {
			ref = i
		}
		fmt.Fprintf(tw, "%s\t", n)
		for _, c := range cols {
			v := median(i, func(x T) float64 { return c.value(n, x) })
			vals[i] = append(vals[i], v)
			fmt.Fprintf(tw, "%s\t", fmtCell(c.format, v))
		}
		fmt.Fprintln(tw)
	}
	for i, n := range names {
		if ref < 0 || i == ref {
			continue
		}
		fmt.Fprintf(tw, "%s / %s\t", n, refLib)
		for c, col := range cols {
			cell := "-"
			// Lateness can be negative (an event before its time on a
			// schedule that starts at a late first event): no ratio then.
			if a, b := vals[i][c], vals[ref][c]; !noRatio[col.name] && a > 0 && b > 0 {
				cell = ratioCell(a / b)
			}
			fmt.Fprintf(tw, "%s\t", cell)
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
	return vals
}

func ratioCell(r float64) string {
	if r < 0.01 {
		return fmt.Sprintf("%.4f", r)
	}
	return fmt.Sprintf("%.2f", r)
}

var allowCols = []rateCol[AllowResult]{
	{"calls/s", "%.0f", func(_ string, r AllowResult) float64 { return r.OpsPerSec() }},
	{"wall µs/event", "%.2f", func(_ string, r AllowResult) float64 { return us(r.PerOp()) }},
	{"Redis CPU µs/event", "%.1f", redisOnly(AllowResult.CPUPerCall)},
	{"calls/event", "%.2f", redisOnly(func(r AllowResult) float64 { return r.ClientPerOp() })},
	{"srv calls/event", "%.2f", redisOnly(func(r AllowResult) float64 { return r.ServerPerOp() })},
	{"srv µs/event", "%.1f", redisOnly(func(r AllowResult) float64 { return r.ServerUsecPerOp() })},
}

// redisOnly is f, except for x/time/rate, which makes no Redis calls.
func redisOnly[T any](f func(T) float64) func(string, T) float64 {
	return func(lib string, x T) float64 {
		if lib == xrateName {
			return math.NaN()
		}
		return f(x)
	}
}

var waitCols = []rateCol[rateRound]{
	{"events/s", "%.1f", func(_ string, r rateRound) float64 { return r.AcqPerSec() }},
	{"calls/event", "%.2f", redisOnly(clientPerEvent)},
	{"srv calls/event", "%.2f", redisOnly(func(r rateRound) float64 { return r.SrvCallsPerAcq() })},
	{"Redis CPU µs/event", "%.0f", redisOnly(func(r rateRound) float64 { return r.CPUUsecPerAcq() })},
	{"share max/min", "%.3f", func(lib string, r rateRound) float64 {
		if lib == xrateName {
			return math.NaN()
		}
		return r.Fairness()
	}},
	{"late p50 ms", "%.3f", func(_ string, r rateRound) float64 { return msOf(r.LateP50) }},
	{"late p99 ms", "%.3f", func(_ string, r rateRound) float64 { return msOf(r.LateP99) }},
	{"late max ms", "%.2f", func(_ string, r rateRound) float64 { return msOf(r.LateMax) }},
	{"1s windows over", "%.0f", func(_ string, r rateRound) float64 { return float64(r.Over) }},
}

// printRate prints both tables, their ratios to redis_rate and the goals.
func printRate(out io.Writer, allow []allowRow, multi []rateRow, rounds, calls int, dur time.Duration, idle int64) {
	fmt.Fprintf(out, "\nrate limits: medians of %d rounds, libraries rotating which goes first; ratios to %s\n", rounds, refLib)
	fmt.Fprintf(out, "\n(1) uncontended Allow: one goroutine, %d calls per round, rate %s (never reached)\n\n", calls, allowRate)
	names := make([]string, len(allow))
	for i, r := range allow {
		names[i] = r.lib.Name
	}
	av := printRateTable(out, names, allowCols, func(i int, f func(AllowResult) float64) float64 { return allow[i].median(f) })
	fmt.Fprintln(out, "\n  Redis CPU: INFO cpu used_cpu_sys + used_cpu_user read right around the timed calls;\n"+
		"  calls: INFO commandstats, script calls; srv calls: every command Redis ran, inside scripts too")
	for _, r := range allow {
		var parts []string
		m := r.rounds[len(r.rounds)/2].PerName
		for _, n := range slices.Sorted(maps.Keys(m)) {
			parts = append(parts, fmt.Sprintf("%s=%d", n, m[n]))
		}
		fmt.Fprintf(out, "  %-17s %s; commands of round %d: %s\n", r.lib.Name, r.lib.Config, len(r.rounds)/2+1, strings.Join(parts, " "))
	}

	sc := RateScenario
	fmt.Fprintf(out, "\n(2) %s: %v per round; each goroutine asks at most every %v, all at the start\n",
		sc.Name, dur, sc.Every)
	fmt.Fprintf(out, "    (%s: %s; redis-server idle over %v: %d µs CPU, %.1f µs per event at the rate)\n\n",
		xrateName, RateScenarioOneProc.Name, dur, idle, float64(idle)/(float64(waitRate.Events)/waitRate.Per.Seconds()*dur.Seconds()))
	names = make([]string, len(multi))
	for i, r := range multi {
		names[i] = r.lib.Name
	}
	mv := printRateTable(out, names, waitCols, func(i int, f func(rateRound) float64) float64 { return multi[i].median(f) })
	fmt.Fprintf(out, `
  events/s     events granted / run length (the burst of %d at the start adds %.1f/s)
  calls/event  commands the clients sent per granted event (commandstats: the round trips, polls included)
  srv calls    every command Redis ran, inside scripts too; Redis CPU: INFO cpu sys+user over the run
  share        events of the process that got the most / the fewest
  late         each event's grant time (its worker's clock, after the call returned) less its time on the
               rate's schedule: events in grant order, the first %d at the first event, then one every %v
               (below 0: before that time, the first event having come late)
  1s windows   windows [t, t+1s] from an event holding more than %d + %d events: the sum over the rounds
               is printed in the goals; the column is the median round's
`, waitRate.Burst, float64(waitRate.Burst)/dur.Seconds(), waitRate.Burst, waitRate.Per/time.Duration(waitRate.Events),
		waitRate.Burst, waitRate.Events*int64(overWindow)/int64(waitRate.Per))
	for _, r := range multi {
		var unfinished, first, p99, over []string
		for _, s := range r.rounds {
			unfinished = append(unfinished, fmt.Sprint(s.Unfinished))
			first = append(first, fmt.Sprintf("%.2f", msOf(s.FirstDelay)))
			p99 = append(p99, fmt.Sprintf("%.2f", msOf(s.LateP99)))
			over = append(over, fmt.Sprint(s.Over))
		}
		m := r.rounds[len(r.rounds)/2]
		fmt.Fprintf(out, "  %-17s %s\n  %-17s per process %d..%d, per goroutine %d..%d (median round); waits cut off by the end %s\n",
			r.lib.Name, r.lib.Config, "", m.ProcMin, m.ProcMax, m.GMin, m.GMax, strings.Join(unfinished, ","))
		fmt.Fprintf(out, "  %-17s per round: late p99 ms %s; 1s windows over %s; first event after the run's start ms %s\n",
			"", strings.Join(p99, ", "), strings.Join(over, ", "), strings.Join(first, ", "))
		var parts []string
		for _, n := range slices.Sorted(maps.Keys(m.Counts.perName)) {
			parts = append(parts, fmt.Sprintf("%s=%d", n, m.Counts.perName[n]))
		}
		if len(parts) > 0 {
			fmt.Fprintf(out, "  %-17s commands of round %d: %s\n", "", len(r.rounds)/2+1, strings.Join(parts, " "))
		}
	}
	printRateGoals(out, allow, multi, av, mv)
}

// printRateGoals checks redsem's medians against the goals.
func printRateGoals(out io.Writer, allow []allowRow, multi []rateRow, av, mv [][]float64) {
	find := func(names []string, n string) int { return slices.Index(names, n) }
	var an, mn []string
	for _, r := range allow {
		an = append(an, r.lib.Name)
	}
	for _, r := range multi {
		mn = append(mn, r.lib.Name)
	}
	ra, pa, rm, pm := find(an, redsemLib), find(an, refLib), find(mn, redsemLib), find(mn, refLib)
	if ra < 0 || pa < 0 || rm < 0 || pm < 0 {
		return
	}
	col := func(cols []string, name string) int { return slices.Index(cols, name) }
	var acn, mcn []string
	for _, c := range allowCols {
		acn = append(acn, c.name)
	}
	for _, c := range waitCols {
		mcn = append(mcn, c.name)
	}
	met := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	red := multi[rm]
	steady := red.median(func(r rateRound) float64 { return r.per(r.Counts.client - int64(r.Unfinished)) })
	aCalls, mCalls := av[ra][col(acn, "calls/event")], mv[rm][col(mcn, "calls/event")]
	aCPU, pCPU := av[ra][col(acn, "Redis CPU µs/event")], av[pa][col(acn, "Redis CPU µs/event")]
	mCPU, pmCPU := mv[rm][col(mcn, "Redis CPU µs/event")], mv[pm][col(mcn, "Redis CPU µs/event")]
	share := mv[rm][col(mcn, "share max/min")]
	late := mv[rm][col(mcn, "late p99 ms")]
	over := 0
	var perRound []string
	for _, r := range red.rounds {
		over += r.Over
		perRound = append(perRound, fmt.Sprint(r.Over))
	}
	fmt.Fprintf(out, "\ngoals (%s):\n", redsemLib)
	fmt.Fprintf(out, "  1 round trip per granted event: uncontended %.2f; waiting %.3f (%.3f without the one call of each wait cut off by the end): %s\n",
		aCalls, mCalls, steady, met(aCalls <= goalCalls && steady <= goalCalls+0.005))
	fmt.Fprintf(out, "  Redis CPU per event <= %s's: uncontended %.1f vs %.1f µs (%.2f); waiting %.0f vs %.0f µs (%.2f): %s\n",
		refLib, aCPU, pCPU, aCPU/pCPU, mCPU, pmCPU, mCPU/pmCPU, met(aCPU <= pCPU && mCPU <= pmCPU))
	fmt.Fprintf(out, "  share max/min <= %.1f: %.3f: %s\n", goalShare, share, met(share <= goalShare))
	fmt.Fprintf(out, "  p99 lateness <= %v: %.3f ms: %s\n", goalLateness, late, met(late <= msOf(goalLateness)))
	fmt.Fprintf(out, "  %d over the limit (%v windows): %d in all rounds (%s): %s\n", goalOver, overWindow, over,
		strings.Join(perRound, ","), met(over == goalOver))
}
