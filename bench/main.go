// Command bench runs redsem next to redsync and redislock on one Redis, in
// one process, and prints a table with ratios against redsem:
//
//	cd bench && go run .
//
// It starts its own redis-server on a free loopback port unless REDIS_ADDR
// is set. The same scenarios run as Go benchmarks: go test -bench . -run '^$'
//
// With -multi it also runs the multi-process scenarios (multiproc.go):
// worker processes of this binary on the same Redis, several rounds,
// libraries alternating, medians and ratios to the best peer:
//
//	go run . -multi                # both tables, ~2 min
//	go run . -multi -inproc=false  # only the multi-process one
//	go run . -redlock -inproc=false # Redlock on 3 nodes, then one stopped
//
// With -rate it runs redsem's RateLimit beside go-redis/redis_rate and
// golang.org/x/time/rate (rate.go): uncontended Allow, and 8 processes x
// 4 goroutines asking on one name at twice 200/s (x/time/rate: the 32
// goroutines in one process), -rounds rounds rotating, medians, ratios
// to redis_rate, the goals checked:
//
//	go run . -rate -inproc=false -rounds 5 -multi-dur 5s
//
// With -fleet it runs only the fleet tables (fleet.go): 4 asynq worker
// processes against a fake API of 5 calls at once and 20/s, gated by
// redsem's asynqmw, by asynq's x/rate with redis_rate, or per process,
// in five scenarios (~6 min):
//
//	go run . -fleet                    # -fleet-tasks 300 -fleet-rounds 1
//	go run . -fleet -fleet-tasks 100 -fleet-scenarios steady
//
// With -adaptive it runs only the adaptive-limits table (adaptive.go,
// issue 33): 4 processes x 8 goroutines against an upstream whose limits
// are hidden and move (cold start, halved, doubled), each variant in
// turn: a fleet told the exact limits, per-process AIMD
// (go-concurrency-limits), a fixed guess (~4.5 min):
//
//	go run . -adaptive
//	go run . -adaptive -adaptive-rounds 3 -adaptive-variants oracle,"fixed guess"
//	go run . -adaptive -adaptive-headers ms -adaptive-variants oracle,"redsem adaptive"
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

func main() {
	if IsFleetWorker() {
		os.Exit(FleetWorkerMain())
	}
	if IsAdaptiveWorker() {
		os.Exit(AdaptiveWorkerMain())
	}
	if IsWorker() {
		os.Exit(WorkerMain())
	}
	nUnc := flag.Int("uncontended", 2000, "lock+unlock pairs per library, uncontended")
	nCon := flag.Int("contended", 1000, "acquisitions per library, contended mutex")
	nSem := flag.Int("semaphore", 2000, "acquisitions, semaphore")
	capDur := flag.Duration("cap", 8*time.Second, "stop a contended run after this long (0 = never), reporting what it reached")
	inproc := flag.Bool("inproc", true, "run the in-process scenarios (goroutines of this process)")
	multi := flag.Bool("multi", false, "run the multi-process scenarios (worker processes)")
	rounds := flag.Int("rounds", 3, "multi-process: rounds per scenario and library (medians)")
	multiDur := flag.Duration("multi-dur", 2*time.Second, "multi-process: length of one run")
	redlock := flag.Bool("redlock", false, "run the Redlock table: 3 nodes, then one stopped (worker processes)")
	rate := flag.Bool("rate", false, "run the rate-limit tables: redsem RateLimit beside redis_rate and x/time/rate")
	rateCalls := flag.Int("rate-calls", 3000, "rate: uncontended Allow calls per library and round")
	fleet := flag.Bool("fleet", false, "run only the fleet tables: asynq worker processes against a limited fake API")
	fleetTasks := flag.Int("fleet-tasks", 300, "fleet: tasks per run")
	fleetRounds := flag.Int("fleet-rounds", 1, "fleet: rounds of every scenario and variant")
	fleetTimeout := flag.Duration("fleet-timeout", 120*time.Second, "fleet: end a run after this long, reporting what it reached")
	fleetScen := flag.String("fleet-scenarios", "", "fleet: comma-separated scenarios (steady,skewed,fresh,restart,pushback; default all)")
	fleetVar := flag.String("fleet-variants", "", "fleet: comma-separated variants (redsem, x/rate+redis_rate, per-process x/time/rate; default all)")
	adaptive := flag.Bool("adaptive", false, "run only the adaptive-limits table: worker processes against an upstream whose limits are hidden and move")
	adaptiveRounds := flag.Int("adaptive-rounds", 1, "adaptive: rounds of every variant (medians; the order rotates)")
	adaptivePhases := flag.String("adaptive-phases", "30s,20s,30s", "adaptive: lengths of the cold start, halved and doubled phases")
	adaptiveLatency := flag.String("adaptive-latency", "150ms,250ms", "adaptive: the upstream's call time, uniform between these")
	adaptiveVar := flag.String("adaptive-variants", "", "adaptive: comma-separated variants (oracle, per-process AIMD, fixed guess; default all that are built)")
	adaptiveDump := flag.String("adaptive-dump", "", "adaptive: write each run's 100 ms series as CSV into this directory")
	adaptiveHeaders := flag.String("adaptive-headers", "", "adaptive: the upstream advertises its rate as a quota a second in RateLimit headers, the reset in ms or s (whole seconds)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *adaptive {
		o, err := parseAdaptiveOptions(*adaptiveRounds, *adaptivePhases, *adaptiveLatency, *adaptiveVar)
		o.Dump = *adaptiveDump
		if o.Headers = *adaptiveHeaders; o.Headers != "" && o.Headers != "ms" && o.Headers != "s" {
			err = fmt.Errorf("-adaptive-headers: want ms or s, got %q", o.Headers)
		}
		if err == nil {
			err = runAdaptiveTables(ctx, os.Stdout, o)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *fleet {
		o := fleetOptions{Tasks: max(*fleetTasks, 1), Rounds: max(*fleetRounds, 1), Timeout: *fleetTimeout,
			Scenarios: splitList(*fleetScen), Variants: splitList(*fleetVar)}
		if err := runFleetTables(ctx, os.Stdout, o); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	o := options{inproc: *inproc, multi: *multi, redlock: *redlock, rate: *rate, rateCalls: max(*rateCalls, 1),
		nUnc: *nUnc, nCon: *nCon, nSem: *nSem, capDur: *capDur, rounds: max(*rounds, 1), multiDur: *multiDur}
	if err := run(ctx, os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	inproc, multi    bool
	redlock          bool
	rate             bool
	rateCalls        int
	nUnc, nCon, nSem int
	capDur           time.Duration
	rounds           int
	multiDur         time.Duration
}

func run(ctx context.Context, out io.Writer, o options) error {
	srv, err := startRedis()
	if err != nil {
		return err
	}
	defer srv.Stop()
	env, err := NewEnv(ctx, srv.Addr)
	if err != nil {
		return err
	}
	defer env.Close()
	info, _ := env.admin.Info(ctx, "server").Result()
	fmt.Fprintf(out, "redis %s at %s (%s), Go %s, GOMAXPROCS %d, NumCPU %d\n",
		infoField(info, "redis_version"), srv.Addr, map[bool]string{true: "REDIS_ADDR", false: "started by bench"}[srv.cmd == nil],
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU())
	begin := time.Now()
	if o.inproc {
		if err := runInProcess(ctx, out, env, o.nUnc, o.nCon, o.nSem, o.capDur); err != nil {
			return err
		}
	}
	if o.multi {
		rows, err := runMulti(ctx, env, o.rounds, o.multiDur)
		if err != nil {
			return err
		}
		printMulti(out, rows, o.rounds, o.multiDur)
	}
	if o.redlock {
		rows, err := runRedlock(ctx, env, o.rounds, o.multiDur)
		if err != nil {
			return err
		}
		printRedlock(out, rows, o.rounds, o.multiDur)
	}
	if o.rate {
		idle, err := idleCPU(ctx, env, o.multiDur)
		if err != nil {
			return err
		}
		allow, multi, err := runRate(ctx, env, o.rounds, o.rateCalls, o.multiDur)
		if err != nil {
			return err
		}
		printRate(out, allow, multi, o.rounds, o.rateCalls, o.multiDur, idle)
	}
	fmt.Fprintf(out, "\ntotal run time %v\n", time.Since(begin).Round(time.Millisecond))
	return nil
}

// runMulti runs every multi-process scenario: per scenario, rounds
// rounds, in each every library once, starting with a different one each
// round.
func runMulti(ctx context.Context, env *Env, rounds int, dur time.Duration) ([]MultiRow, error) {
	var rows []MultiRow
	for _, sc := range MultiScenarios {
		var idx []int
		for _, lib := range MultiLibs {
			row := MultiRow{Scenario: sc, Lib: lib}
			switch {
			case !lib.supports(sc) && sc.Limit == 1:
				continue // a peer for the semaphore only
			case !lib.supports(sc):
				row.NA = "no semaphore"
			case lib.Unavailable != "":
				row.NA = lib.Unavailable
			default:
				idx = append(idx, len(rows))
			}
			rows = append(rows, row)
		}
		for round := range rounds {
			for k := range idx {
				i := idx[(k+round)%len(idx)]
				r, err := RunMulti(ctx, env, sc, rows[i].Lib, MultiOpts{Duration: dur})
				if err != nil {
					return nil, fmt.Errorf("%s, %s, round %d: %w", sc.Name, rows[i].Lib.Name, round+1, err)
				}
				s := r.Analyze()
				fmt.Fprintf(os.Stderr, "multi: %s, %s, round %d: %d acquisitions, %.0f/s, peak %d\n",
					sc.Name, rows[i].Lib.Name, round+1, s.N, s.AcqPerSec(), s.Peak)
				rows[i].Rounds = append(rows[i].Rounds, s)
			}
		}
	}
	return rows, nil
}

func runInProcess(ctx context.Context, out io.Writer, env *Env, nUnc, nCon, nSem int, capDur time.Duration) error {
	fmt.Fprintf(out, "contended: %d workers, each loop lock -> hold %v -> unlock (-> think %v in %q); cap %v per run\n\n",
		workers, hold, MutexThink.Think, MutexThink.Name, capDur)

	var results []Result
	// Interleaved rounds, so a burst of load from elsewhere on the machine
	// hits every library alike; the median round counts.
	rounds := make([][]Result, len(UncontendedLibs))
	for range uncontendedRounds {
		for i, lib := range UncontendedLibs {
			r, err := RunUncontended(ctx, env, lib, max(nUnc/uncontendedRounds, 1), Timer{})
			if err != nil {
				return err
			}
			rounds[i] = append(rounds[i], r)
		}
	}
	for _, rs := range rounds {
		results = append(results, medianRound(rs))
	}
	busy := make([][]Result, len(BusyLibs))
	for range uncontendedRounds {
		for i, lib := range BusyLibs {
			r, err := RunBusy(ctx, env, lib, max(nUnc/uncontendedRounds, 1))
			if err != nil {
				return err
			}
			busy[i] = append(busy[i], r)
		}
	}
	for _, rs := range busy {
		results = append(results, medianRound(rs))
	}
	var times []commandTimes
	n := max(nUnc/4, 1)
	for _, lib := range UncontendedLibs {
		t, err := slowlogPass(ctx, env, "uncontended", lib.Name, n, func() error {
			_, err := RunUncontended(ctx, env, lib, n, Timer{})
			return err
		})
		if err != nil {
			return err
		}
		times = append(times, t)
	}
	for _, lib := range BusyLibs {
		t, err := slowlogPass(ctx, env, BusyScenario, lib.Name, n, func() error {
			_, err := RunBusy(ctx, env, lib, n)
			return err
		})
		if err != nil {
			return err
		}
		times = append(times, t)
	}
	for _, sc := range []Contention{MutexLoop, MutexThink} {
		for _, lib := range ContendedLibs {
			r, err := RunContended(ctx, env, sc, lib, nCon, capDur, Timer{})
			if err != nil {
				return err
			}
			results = append(results, r)
		}
	}
	r, err := RunContended(ctx, env, SemaphoreLoop, SemaphoreLib, nSem, capDur, Timer{})
	if err != nil {
		return err
	}
	results = append(results, r)

	printTable(out, results)
	printDetails(out, results)
	printCommandTimes(out, times)
	return nil
}

const uncontendedRounds = 5

// medianRound sums the rounds' counts and takes the median round's time
// per op.
func medianRound(rs []Result) Result {
	perOp := make([]time.Duration, len(rs))
	sum := rs[0]
	sum.PerName = maps.Clone(sum.PerName)
	for i, r := range rs {
		perOp[i] = r.PerOp()
		if i == 0 {
			continue
		}
		sum.N += r.N
		sum.ClientCmds += r.ClientCmds
		sum.ServerCalls += r.ServerCalls
		sum.ServerUsec += r.ServerUsec
		sum.SetupCmds += r.SetupCmds
		sum.HookCmds += r.HookCmds
		sum.PubSubCmds += r.PubSubCmds
		for k, v := range r.PerName {
			sum.PerName[k] += v
		}
	}
	slices.Sort(perOp)
	sum.Elapsed = perOp[len(perOp)/2] * time.Duration(sum.N)
	return sum
}

// splitList splits a comma-separated flag ("" is none).
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func infoField(info, field string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			return v
		}
	}
	return "?"
}

// printTable prints one row per run; ratios are against the "redsem" row
// of the same scenario (>1 = more ops/s, or a longer gap, than redsem).
func printTable(out io.Writer, rs []Result) {
	ref := map[string]Result{}
	for _, r := range rs {
		if r.Lib.Name == "redsem" {
			ref[r.Scenario] = r
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tlibrary\tn\tops/s\tµs/op\tgap p50\tgap p99\thandoff p50\thandoff p99\twait p50\twait p99\twait max\treacq %\tcmds/acq\tsrv calls/acq\tsrv µs/acq\tops/s ×redsem\tgap p50 ×redsem\t")
	for _, r := range rs {
		contended := r.Scenario != "uncontended" && r.Scenario != BusyScenario
		mutex := contended && r.MaxHeld <= 1 && r.Scenario != SemaphoreLoop.Name
		base, hasRef := ref[r.Scenario]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%.1f\t%.1f\t%s\t%s\t\n",
			r.Scenario, r.Lib.Name, r.N, r.OpsPerSec(), us(r.PerOp()),
			ifs(mutex, ms(r.GapP50)), ifs(mutex, ms(r.GapP99)),
			ifs(mutex, ms(r.HandoffP50)), ifs(mutex, ms(r.HandoffP99)),
			ifs(contended, ms(r.WaitP50)), ifs(contended, ms(r.WaitP99)), ifs(contended, ms(r.WaitMax)),
			ifs(mutex, fmt.Sprintf("%.0f", r.ReacquiredPct())),
			r.ClientPerOp(), r.ServerPerOp(), r.ServerUsecPerOp(),
			ifs(hasRef, fmt.Sprintf("%.2f", r.OpsPerSec()/base.OpsPerSec())),
			ifs(hasRef && mutex && base.GapP50 > 0, fmt.Sprintf("%.2f", float64(r.GapP50)/float64(base.GapP50))))
	}
	_ = tw.Flush()
}

func printDetails(out io.Writer, rs []Result) {
	fmt.Fprintf(out, `
columns (times in ms unless µs):
  µs/op          wall time / n; uncontended: median of %d interleaved rounds; contended:
                 per acquisition, including the %v hold
  gap            from a holder's unlock call to the next holder's lock returning
  handoff        the same, only where the next holder is another worker
  wait           lock call to return; waits still going when the run ended count with the
                 time waited so far
  reacq %%        acquisitions that went straight back to the worker that had just released
  cmds/acq       commands the clients sent (INFO commandstats: script calls, pub/sub, PING,
                 plus a library's own plain commands such as redsync's SET)
  srv calls/acq  every command Redis ran, including those inside Lua scripts
  srv µs/acq     Redis' time in the clients' commands (commandstats usec; a script's
                 includes its calls; wall time, so inflated when Redis is descheduled)
  ×redsem        ratio to the "redsem" row of the same scenario
`, uncontendedRounds, hold)
	fmt.Fprintln(out, "\nconfigurations and commands (commandstats deltas):")
	for _, r := range rs {
		names := slices.Sorted(maps.Keys(r.PerName))
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = fmt.Sprintf("%s=%d", n, r.PerName[n])
		}
		fmt.Fprintf(out, "  %-16s  %-17s  %s\n  %37s%s\n", r.Scenario, r.Lib.Name, r.Lib.Config, "", strings.Join(parts, " "))
		var notes []string
		if r.GaveUp > 0 {
			notes = append(notes, fmt.Sprintf("library gave up waiting %d times (retried)", r.GaveUp))
		}
		if r.Unfinished > 0 {
			notes = append(notes, fmt.Sprintf("%d workers still waiting when the run ended", r.Unfinished))
		}
		if r.Violations > 0 {
			notes = append(notes, fmt.Sprintf("LIMIT EXCEEDED %d times", r.Violations))
		}
		if r.Scenario == SemaphoreLoop.Name {
			notes = append(notes, fmt.Sprintf("max held at once %d", r.MaxHeld))
		}
		if !r.CountsAgree() {
			notes = append(notes, fmt.Sprintf("WARNING: commandstats client count %d (+%d setup, %d pub/sub) != hook count %d",
				r.ClientCmds, r.SetupCmds, r.PubSubCmds, r.HookCmds))
		}
		if len(notes) > 0 {
			fmt.Fprintf(out, "  %37s%s\n", "", strings.Join(notes, "; "))
		}
	}
}

func ifs(ok bool, s string) string {
	if ok {
		return s
	}
	return "-"
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

// parseAdaptiveOptions reads the -adaptive flags.
func parseAdaptiveOptions(rounds int, phases, latency, variants string) (adaptiveOptions, error) {
	o := adaptiveOptions{Rounds: max(rounds, 1), Variants: splitList(variants)}
	for _, p := range splitList(phases) {
		d, err := time.ParseDuration(p)
		if err != nil || d < 4*time.Second {
			return o, fmt.Errorf("-adaptive-phases: %q: want a duration of 4s or more", p)
		}
		o.Phases = append(o.Phases, d)
	}
	if len(o.Phases) != 3 {
		return o, fmt.Errorf("-adaptive-phases: want 3 lengths, got %q", phases)
	}
	lat := splitList(latency)
	for i := range lat {
		d, err := time.ParseDuration(lat[i])
		if err != nil || len(lat) != 2 || d <= 0 {
			return o, fmt.Errorf("-adaptive-latency: want two positive durations, got %q", latency)
		}
		o.Latency[i] = d
	}
	if len(lat) != 2 || o.Latency[1] < o.Latency[0] {
		return o, fmt.Errorf("-adaptive-latency: want min,max, got %q", latency)
	}
	for _, v := range o.Variants {
		if av, ok := adaptiveVariantNamed(v); !ok || av.New == nil {
			return o, fmt.Errorf("-adaptive-variants: %q is not a variant that is built", v)
		}
	}
	return o, nil
}
