package main

// Merging the workers' reports of multi-process runs (multiproc.go) into
// one set of numbers per run, medians over rounds, and the tables.

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// MultiStats are the numbers of one multi-process run.
type MultiStats struct {
	N       int // acquisitions granted from start to end
	Elapsed time.Duration
	// Gaps: from a release that freed a permit of a full lock while
	// someone was waiting, to the next acquisition (any process).
	Gaps            int
	GapP50, GapP99  time.Duration
	SameProc, SameG int // of those next acquisitions: by the releaser's process / goroutine
	// Gap p50 where the next acquisition was in the releaser's own
	// process (redsem wakes those directly) / in another process.
	GapSameProcP50, GapOtherProcP50 time.Duration
	WaitP50, WaitP99, WaitMax       time.Duration
	Unfinished                      int // waits cut short by the end of the run
	ProcMin, ProcMax                int // acquisitions per process
	GMin, GMax                      int // acquisitions per goroutine
	HookCmds                        int64
	Counts                          counts
	CPUUsec                         int64
	Peak                            int64 // most holders at once, from the merged timestamps
	Violations                      int   // acquisitions that made more holders than the limit
	GaveUp                          int64
	Goroutines                      int
}

func (s MultiStats) AcqPerSec() float64  { return float64(s.N) / s.Elapsed.Seconds() }
func (s MultiStats) per(v int64) float64 { return float64(v) / float64(max(s.N, 1)) }
func (s MultiStats) CmdsPerAcq() float64 { return s.per(s.HookCmds) }
func (s MultiStats) SrvCallsPerAcq() float64 {
	return s.per(s.Counts.server)
}
func (s MultiStats) SrvUsecPerAcq() float64 { return s.per(s.Counts.usec) }
func (s MultiStats) CPUUsecPerAcq() float64 { return s.per(s.CPUUsec) }
func (s MultiStats) SameProcPct() float64 {
	return 100 * float64(s.SameProc) / float64(max(s.Gaps, 1))
}

// Fairness is the most acquisitions of one process over the fewest
// (+Inf when a process made none).
func (s MultiStats) Fairness() float64 {
	if s.ProcMin == 0 {
		return math.Inf(1)
	}
	return float64(s.ProcMax) / float64(s.ProcMin)
}

// CountsAgree cross-checks commandstats (client commands) against the
// workers' hooks, which do not see pub/sub commands nor the pub/sub
// connection's health-check PINGs, but do see a command that the end of
// the run cancelled before it was sent.
func (s MultiStats) CountsAgree() bool {
	d := s.Counts.client - s.Counts.pubsub - s.HookCmds
	return d >= -int64(s.Goroutines)-2 && d <= 2+2*int64(s.Goroutines)+s.HookCmds/100
}

type evKind int

// At the same nanosecond: releases, then grants, then asks.
const (
	evRel evKind = iota
	evGot
	evAsk
)

type event struct {
	t       int64
	kind    evKind
	proc, g int
}

// Analyze merges the workers' reports of r.
func (r MultiRun) Analyze() MultiStats {
	s := MultiStats{Counts: r.Counts, HookCmds: r.Counts.hook, CPUUsec: r.CPUUsec, Goroutines: r.Procs * r.Scenario.Goroutines}
	var evs []event
	var waits []time.Duration
	perProc := make([]int, r.Procs)
	perG := map[[2]int]int{}
	for p := range r.Procs {
		for g := range r.Scenario.Goroutines {
			perG[[2]int{p, g}] = 0
		}
	}
	lastRel := r.Start
	for _, rep := range r.Reports {
		s.GaveUp += rep.GaveUp
		for _, a := range rep.Acqs {
			evs = append(evs, event{a.Asked, evAsk, rep.Proc, a.G}, event{a.Got, evGot, rep.Proc, a.G}, event{a.Rel, evRel, rep.Proc, a.G})
			waits = append(waits, time.Duration(a.Got-a.Asked))
			perProc[rep.Proc]++
			perG[[2]int{rep.Proc, a.G}]++
			lastRel = max(lastRel, a.Rel)
		}
		for _, c := range rep.Censored {
			evs = append(evs, event{c.Asked, evAsk, rep.Proc, c.G})
			waits = append(waits, time.Duration(max(r.End-c.Asked, 0)))
			s.Unfinished++
		}
	}
	s.N = len(waits) - s.Unfinished
	s.Elapsed = time.Duration(r.End - r.Start)
	if r.PerGoroutine > 0 { // a counted run ends with its last release
		s.Elapsed = time.Duration(lastRel - r.Start)
	}
	s.ProcMin, s.ProcMax = slices.Min(perProc), slices.Max(perProc)
	gs := slices.Collect(maps.Values(perG))
	s.GMin, s.GMax = slices.Min(gs), slices.Max(gs)
	s.WaitP50, s.WaitP99, s.WaitMax = percentile(waits, 50), percentile(waits, 99), percentile(waits, 100)

	sort.Slice(evs, func(i, j int) bool {
		if evs[i].t != evs[j].t {
			return evs[i].t < evs[j].t
		}
		return evs[i].kind < evs[j].kind
	})
	var (
		held, waiting int64
		pending       *event // the release that freed a permit of the full lock
		gaps          []time.Duration
		same, other   []time.Duration
	)
	for i := range evs {
		ev := &evs[i]
		switch ev.kind {
		case evAsk:
			waiting++
		case evGot:
			waiting--
			held++
			s.Peak = max(s.Peak, held)
			if held > r.Scenario.Limit {
				s.Violations++
			}
			if pending != nil {
				gap := time.Duration(ev.t - pending.t)
				gaps = append(gaps, gap)
				if ev.proc != pending.proc {
					other = append(other, gap)
				} else {
					same = append(same, gap)
					s.SameProc++
					if ev.g == pending.g {
						s.SameG++
					}
				}
				pending = nil
			}
		case evRel:
			if held == r.Scenario.Limit && waiting > 0 && pending == nil {
				pending = ev
			}
			held--
		}
	}
	s.Gaps = len(gaps)
	s.GapP50, s.GapP99 = percentile(gaps, 50), percentile(gaps, 99)
	s.GapSameProcP50, s.GapOtherProcP50 = percentile(same, 50), percentile(other, 50)
	return s
}

// MultiRow is one library in one multi-process scenario over all rounds.
type MultiRow struct {
	Scenario MultiScenario
	Lib      MultiLib
	NA       string // why there are no numbers
	Rounds   []MultiStats
}

// median of f over the rounds.
func (r MultiRow) median(f func(MultiStats) float64) float64 {
	if len(r.Rounds) == 0 {
		return math.NaN()
	}
	v := make([]float64, len(r.Rounds))
	for i, s := range r.Rounds {
		v[i] = f(s)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// multiMetric is a column of the multi-process table.
type multiMetric struct {
	name   string
	format string
	value  func(MultiStats) float64
	// better: +1 when higher is better, -1 when lower is, 0 when neither
	// (no ratio to the best peer).
	better int
}

var multiMetrics = []multiMetric{
	{name: "acq/s", format: "%.0f", value: MultiStats.AcqPerSec, better: +1},
	{name: "gap p50", format: "%.2f", value: func(s MultiStats) float64 { return msOf(s.GapP50) }, better: -1},
	{name: "gap p99", format: "%.2f", value: func(s MultiStats) float64 { return msOf(s.GapP99) }, better: -1},
	{name: "same-proc %", format: "%.0f", value: MultiStats.SameProcPct},
	{name: "wait p50", format: "%.2f", value: func(s MultiStats) float64 { return msOf(s.WaitP50) }, better: -1},
	{name: "wait p99", format: "%.2f", value: func(s MultiStats) float64 { return msOf(s.WaitP99) }, better: -1},
	{name: "wait max", format: "%.1f", value: func(s MultiStats) float64 { return msOf(s.WaitMax) }, better: -1},
	{name: "proc min", format: "%.0f", value: func(s MultiStats) float64 { return float64(s.ProcMin) }},
	{name: "proc max", format: "%.0f", value: func(s MultiStats) float64 { return float64(s.ProcMax) }},
	{name: "max/min", format: "%.2f", value: MultiStats.Fairness, better: -1},
	{name: "cmds/acq", format: "%.2f", value: MultiStats.CmdsPerAcq, better: -1},
	{name: "srv calls/acq", format: "%.1f", value: MultiStats.SrvCallsPerAcq, better: -1},
	{name: "srv µs/acq", format: "%.1f", value: MultiStats.SrvUsecPerAcq, better: -1},
	{name: "cpu µs/acq", format: "%.1f", value: MultiStats.CPUUsecPerAcq, better: -1},
}

func fmtMetric(m multiMetric, v float64) string { return fmtCell(m.format, v) }

// printMulti prints the multi-process table (medians over the rounds),
// the ratios of redsem to the best peer, and the details.
func printMulti(out io.Writer, rows []MultiRow, rounds int, dur time.Duration) {
	fmt.Fprintf(out, "\nmulti-process: worker processes (this binary re-executed), each with its own go-redis client\n"+
		"(and redsem Client); each goroutine loops lock -> hold -> unlock (-> pause); %v per run,\n"+
		"%d rounds, libraries alternating within a round; medians over the rounds; peak = most at once in any round\n\n", dur, rounds)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "scenario\tlibrary\tn\t")
	for _, m := range multiMetrics {
		fmt.Fprintf(tw, "%s\t", m.name)
	}
	fmt.Fprint(tw, "peak/limit\t\n")
	for _, r := range rows {
		if r.NA != "" {
			fmt.Fprintf(tw, "%s\t%s\tn/a\t", r.Scenario.Name, r.Lib.Name)
			for range multiMetrics {
				fmt.Fprint(tw, "n/a\t")
			}
			fmt.Fprint(tw, "n/a\t\n")
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t", r.Scenario.Name, r.Lib.Name, r.median(func(s MultiStats) float64 { return float64(s.N) }))
		for _, m := range multiMetrics {
			fmt.Fprintf(tw, "%s\t", fmtMetric(m, r.median(m.value)))
		}
		fmt.Fprintf(tw, "%d/%d\t\n", r.peak(), r.Scenario.Limit)
	}
	_ = tw.Flush()

	fmt.Fprintln(out, "\nredsem / best peer (per metric the best peer row of the scenario; acq/s: >1 = redsem faster; others: <1 = redsem lower/better)")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "scenario\t")
	for _, m := range multiMetrics {
		if m.better != 0 {
			fmt.Fprintf(tw, "%s\t", m.name)
		}
	}
	fmt.Fprint(tw, "\n")
	var notes []string
	for _, sc := range scenariosOf(rows) {
		var ref *MultiRow
		var peers []MultiRow
		for i, r := range rows {
			switch {
			case r.Scenario.Name != sc.Name || r.NA != "":
			case r.Lib.Name == "redsem":
				ref = &rows[i]
			default:
				peers = append(peers, r)
			}
		}
		if ref == nil {
			continue
		}
		if len(peers) == 0 {
			fmt.Fprintf(tw, "%s\t", sc.Name)
			for _, m := range multiMetrics {
				if m.better != 0 {
					fmt.Fprint(tw, "n/a\t")
				}
			}
			fmt.Fprint(tw, "\n")
			continue
		}
		fmt.Fprintf(tw, "%s\t", sc.Name)
		var best []string
		for _, m := range multiMetrics {
			if m.better == 0 {
				continue
			}
			bv, bn := math.NaN(), ""
			for _, p := range peers {
				v := p.median(m.value)
				if math.IsNaN(bv) || float64(m.better)*(v-bv) > 0 {
					bv, bn = v, p.Lib.Name
				}
			}
			rv := ref.median(m.value)
			ratio := rv / bv
			cell := fmt.Sprintf("%.2f", ratio)
			switch {
			case math.IsInf(rv, 1) && math.IsInf(bv, 1):
				cell = "-"
			case bv == 0 && rv == 0:
				cell = "1.00"
			case math.IsInf(ratio, 1):
				cell = "inf"
			}
			fmt.Fprintf(tw, "%s\t", cell)
			best = append(best, fmt.Sprintf("%s: %s %s", m.name, bn, fmtMetric(m, bv)))
		}
		fmt.Fprint(tw, "\n")
		notes = append(notes, fmt.Sprintf("  %s, best peer per metric: %s", sc.Name, strings.Join(best, "; ")))
	}
	_ = tw.Flush()
	for _, n := range notes {
		fmt.Fprintln(out, n)
	}

	fmt.Fprintf(out, `
columns (times in ms unless µs):
  n              acquisitions granted in the run (median round)
  gap            from a release that freed a permit of a full lock while somebody was waiting,
                 to the next acquisition, in any process (merged timestamps, one wall clock)
  same-proc %%    of those next acquisitions, the share made in the releaser's own process
  wait           lock call to return; waits still going at the end count with the time
                 waited until then
  proc min/max   acquisitions of the process that made the fewest / most; max/min their ratio
  cmds/acq       commands the workers sent (go-redis hook in each worker; pub/sub not included)
  srv calls/acq  every command Redis ran (INFO commandstats), including those inside Lua scripts
  srv µs/acq     Redis' time in the clients' commands (commandstats usec, as in the table above)
  cpu µs/acq     redis-server used_cpu_sys + used_cpu_user (INFO cpu), all of its work
                 (network I/O, pub/sub, cron) included
  peak/limit     most holders at once seen in the merged timestamps (lock returned .. unlock
                 called, so a true lower bound): must not exceed the limit
`)
	fmt.Fprintln(out, "\nmulti-process configurations and commands (commandstats deltas, all rounds):")
	for _, r := range rows {
		if r.NA != "" {
			fmt.Fprintf(out, "  %-29s  %-22s  %s\n", r.Scenario.Name, r.Lib.Name, r.NA)
			continue
		}
		total := map[string]int64{}
		var notes []string
		var acqs []string
		var unfinished, violations int
		var gaveUp, n int64
		agree := true
		for _, s := range r.Rounds {
			for k, v := range s.Counts.perName {
				total[k] += v
			}
			n += int64(s.N)
			unfinished += s.Unfinished
			violations += s.Violations
			gaveUp += s.GaveUp
			agree = agree && s.CountsAgree()
			acqs = append(acqs, fmt.Sprintf("%.0f", s.AcqPerSec()))
		}
		names := slices.Sorted(maps.Keys(total))
		parts := make([]string, len(names))
		for i, k := range names {
			parts[i] = fmt.Sprintf("%s=%.2f", k, float64(total[k])/float64(max(n, 1)))
		}
		fmt.Fprintf(out, "  %-29s  %-22s  %s\n", r.Scenario.Name, r.Lib.Name, r.Lib.config(r.Scenario))
		fmt.Fprintf(out, "  %55s per acq: %s\n", "", strings.Join(parts, " "))
		notes = append(notes, "acq/s per round "+strings.Join(acqs, ", "))
		med := func(f func(MultiStats) float64) float64 { return r.median(f) }
		notes = append(notes, fmt.Sprintf("per goroutine min/max %.0f/%.0f", med(func(s MultiStats) float64 { return float64(s.GMin) }),
			med(func(s MultiStats) float64 { return float64(s.GMax) })))
		notes = append(notes, fmt.Sprintf("same goroutine after a gap %.0f%%", med(func(s MultiStats) float64 {
			return 100 * float64(s.SameG) / float64(max(s.Gaps, 1))
		})))
		notes = append(notes, fmt.Sprintf("gap p50 to the same process %.2f ms, to another %.2f ms",
			med(func(s MultiStats) float64 { return msOf(s.GapSameProcP50) }), med(func(s MultiStats) float64 { return msOf(s.GapOtherProcP50) })))
		if unfinished > 0 {
			notes = append(notes, fmt.Sprintf("%d waits still going at the ends", unfinished))
		}
		if gaveUp > 0 {
			notes = append(notes, fmt.Sprintf("library gave up waiting %d times (retried)", gaveUp))
		}
		if violations > 0 {
			notes = append(notes, fmt.Sprintf("LIMIT EXCEEDED %d times", violations))
		}
		if !agree {
			notes = append(notes, "WARNING: commandstats client count != hook count in some round")
		}
		fmt.Fprintf(out, "  %55s %s\n", "", strings.Join(notes, "; "))
	}
}

func (r MultiRow) peak() int64 {
	var p int64
	for _, s := range r.Rounds {
		p = max(p, s.Peak)
	}
	return p
}

func scenariosOf(rows []MultiRow) []MultiScenario {
	var out []MultiScenario
	for _, r := range rows {
		if !slices.ContainsFunc(out, func(s MultiScenario) bool { return s.Name == r.Scenario.Name }) {
			out = append(out, r.Scenario)
		}
	}
	return out
}
