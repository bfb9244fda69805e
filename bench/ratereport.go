package main

// The rate tables: rounds alternating the libraries, medians, ratios of
// redsem to redis_rate.

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

// allowRow is one library's uncontended rounds.
type allowRow struct {
	lib    Lib
	rounds []AllowResult
}

// rateRow is one library's rounds of RateScenario.
type rateRow struct {
	lib    MultiLib
	rounds []MultiStats
	over   []float64 // OverRate of each round
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
// goes first alternating from round to round.
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
				return nil, nil, fmt.Errorf("%s, %s, round %d: %w", RateScenario.Name, RateMultiLibs[i].Name, round+1, err)
			}
			s := run.Analyze()
			fmt.Fprintf(os.Stderr, "rate: %s, round %d: %d events, %.0f/s, %.1f calls/event\n",
				RateMultiLibs[i].Name, round+1, s.N, s.AcqPerSec(), s.CmdsPerAcq())
			multi[i].lib = RateMultiLibs[i]
			multi[i].rounds = append(multi[i].rounds, s)
			multi[i].over = append(multi[i].over, run.OverRate(waitRate))
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

func (r rateRow) median(f func(MultiStats) float64) float64 {
	v := make([]float64, len(r.rounds))
	for i, x := range r.rounds {
		v[i] = f(x)
	}
	return medianFloat(v)
}

// printRate prints both tables and their ratios (redsem / redis_rate).
func printRate(out io.Writer, allow []allowRow, multi []rateRow, rounds, calls int, dur time.Duration, idle int64) {
	fmt.Fprintf(out, "\nrate limits: medians of %d rounds, libraries alternating; ratios redsem / redis_rate\n", rounds)
	fmt.Fprintf(out, "\n(a) uncontended Allow: one goroutine, %d calls per round, rate %s (never reached)\n\n", calls, allowRate)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "library\tcalls/s\tµs/call\tRedis CPU µs/call\tcmds/call\tsrv calls/call\tsrv µs/call\t")
	cols := []func(AllowResult) float64{
		func(r AllowResult) float64 { return r.OpsPerSec() },
		func(r AllowResult) float64 { return us(r.PerOp()) },
		AllowResult.CPUPerCall,
		func(r AllowResult) float64 { return r.ClientPerOp() },
		func(r AllowResult) float64 { return r.ServerPerOp() },
		func(r AllowResult) float64 { return r.ServerUsecPerOp() },
	}
	vals := make([][]float64, len(allow))
	for i, r := range allow {
		fmt.Fprintf(tw, "%s\t", r.lib.Name)
		for _, f := range cols {
			vals[i] = append(vals[i], r.median(f))
			fmt.Fprintf(tw, "%.2f\t", vals[i][len(vals[i])-1])
		}
		fmt.Fprintln(tw)
	}
	if len(vals) == 2 {
		fmt.Fprintf(tw, "redsem / redis_rate\t")
		for c := range cols {
			fmt.Fprintf(tw, "%.2f\t", vals[0][c]/vals[1][c])
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
	printRateMulti(out, multi, dur, idle)
}

func printRateMulti(out io.Writer, multi []rateRow, dur time.Duration, idle int64) {
	fmt.Fprintf(out, "\n(b) %s: %v per round, every goroutine asks again at once\n", RateScenario.Name, dur)
	fmt.Fprintf(out, "    (redis-server idle over %v: %d µs CPU, %.1f µs per event at the rate)\n\n", dur, idle,
		float64(idle)/(float64(waitRate.Events)/waitRate.Per.Seconds()*dur.Seconds()))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "library\tevents/s\t×rate\tover rate\tcmds/event\tsrv calls/event\tRedis CPU µs/event\twait p50 ms\twait p99 ms\twait max ms\tper proc min..max\tper goroutine min..max\t")
	cols := []func(MultiStats) float64{
		MultiStats.AcqPerSec,
		func(s MultiStats) float64 { return s.AcqPerSec() / (float64(waitRate.Events) / waitRate.Per.Seconds()) },
		nil, // over rate: from rateRow.over
		MultiStats.CmdsPerAcq,
		MultiStats.SrvCallsPerAcq,
		MultiStats.CPUUsecPerAcq,
		func(s MultiStats) float64 { return msOf(s.WaitP50) },
		func(s MultiStats) float64 { return msOf(s.WaitP99) },
		func(s MultiStats) float64 { return msOf(s.WaitMax) },
	}
	vals := make([][]float64, len(multi))
	for i, r := range multi {
		fmt.Fprintf(tw, "%s\t", r.lib.Name)
		for _, f := range cols {
			v := medianFloat(r.over)
			if f != nil {
				v = r.median(f)
			}
			vals[i] = append(vals[i], v)
			fmt.Fprintf(tw, "%.2f\t", v)
		}
		m := r.rounds[len(r.rounds)/2]
		fmt.Fprintf(tw, "%d..%d\t%d..%d\t\n", m.ProcMin, m.ProcMax, m.GMin, m.GMax)
	}
	if len(vals) >= 2 {
		fmt.Fprintf(tw, "redsem / redis_rate\t")
		for c := range cols {
			if cols[c] == nil {
				fmt.Fprintf(tw, "-\t")
				continue
			}
			fmt.Fprintf(tw, "%.2f\t", vals[0][c]/vals[1][c])
		}
		fmt.Fprintln(tw, "\t\t")
	}
	_ = tw.Flush()
	fmt.Fprintf(out, `
  events/s     events granted / run length; ×rate: over the rate's %d/s (the burst of %d at the start adds up to %.1f/s)
  over rate    most events in any window beyond burst + rate·window (merged grant times; 0: the rate held)
  cmds/event   commands the clients sent per granted event (commandstats; polls included)
  srv calls    every command Redis ran, inside scripts too; Redis CPU: INFO cpu sys+user over the run
  wait         from asking to being granted; waits cut off by the end count as waited so far
  per proc/goroutine: events of the median round's least and most served process / goroutine
`, waitRate.Events, waitRate.Burst, float64(waitRate.Burst)/dur.Seconds())
	for _, r := range multi {
		var unfinished []int
		for _, s := range r.rounds {
			unfinished = append(unfinished, s.Unfinished)
		}
		fmt.Fprintf(out, "  %-17s %s; waits cut off by the end per round %v\n", r.lib.Name, r.lib.Config, unfinished)
		m := r.rounds[len(r.rounds)/2].Counts.perName
		names := slices.Sorted(maps.Keys(m))
		for i, n := range names {
			names[i] = fmt.Sprintf("%s=%d", n, m[n])
		}
		fmt.Fprintf(out, "  %-17s commands of round %d: %s\n", "", len(r.rounds)/2+1, strings.Join(names, " "))
	}
}
