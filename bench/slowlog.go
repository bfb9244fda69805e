package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// commandTimes is Redis' own time per command a run sent, from SLOWLOG
// with a threshold of 0: unlike commandstats it tells one script or
// function from another (FCALL acquire from FCALL release). Logging every
// command costs Redis time of its own, so it runs in a pass of its own,
// after the timed rounds.
type commandTimes struct {
	Scenario, Lib string
	N             int
	Commands      []commandTime
}

type commandTime struct {
	Label        string // "fcall acquire", "evalsha 1a2b3c4d", "set"
	Calls        int
	Mean, Median time.Duration
}

// slowlogPass runs run (n operations) with every command logged and
// returns the time Redis spent in each kind of command.
func slowlogPass(ctx context.Context, e *Env, scenario, lib string, n int, run func() error) (commandTimes, error) {
	out := commandTimes{Scenario: scenario, Lib: lib, N: n}
	stopLogging := func() { _ = e.admin.ConfigSet(context.Background(), "slowlog-log-slower-than", "10000").Err() }
	defer stopLogging()
	defer func() { _ = e.admin.ConfigSet(context.Background(), "slowlog-max-len", "128").Err() }()
	for _, kv := range [][2]string{{"slowlog-max-len", strconv.Itoa(20*n + 1000)}, {"slowlog-log-slower-than", "0"}} {
		if err := e.admin.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			return out, err
		}
	}
	if err := e.admin.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		return out, err
	}
	if err := run(); err != nil {
		return out, err
	}
	stopLogging()
	logs, err := e.admin.SlowLogGet(ctx, -1).Result()
	if err != nil {
		return out, err
	}
	byLabel := map[string][]time.Duration{}
	for _, l := range logs {
		if label := commandLabel(l); label != "" {
			byLabel[label] = append(byLabel[label], l.Duration)
		}
	}
	for label, ds := range byLabel {
		slices.Sort(ds)
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		out.Commands = append(out.Commands, commandTime{Label: label, Calls: len(ds),
			Mean: sum / time.Duration(len(ds)), Median: ds[len(ds)/2]})
	}
	slices.SortFunc(out.Commands, func(a, b commandTime) int { return strings.Compare(a.Label, b.Label) })
	return out, nil
}

// commandLabel names a logged command: a function by its name's last
// part (redsem_<library hash>_acquire: "fcall acquire"), a script by its
// hash's first 8 digits; "" for the bench's own commands.
func commandLabel(l redis.SlowLog) string {
	if len(l.Args) == 0 {
		return ""
	}
	name := strings.ToLower(l.Args[0])
	switch {
	case name == "slowlog" || name == "config" || name == "info" || name == "hello" || name == "client":
		return ""
	case name == "fcall" && len(l.Args) > 1:
		fn := l.Args[1]
		return "fcall " + fn[strings.LastIndex(fn, "_")+1:]
	case name == "evalsha" && len(l.Args) > 1:
		return "evalsha " + l.Args[1][:min(8, len(l.Args[1]))]
	case name == "eval":
		return "eval (text)"
	}
	return name
}

func printCommandTimes(out io.Writer, ts []commandTimes) {
	fmt.Fprintln(out, "\nRedis time per command (SLOWLOG with threshold 0, a separate pass after the timed rounds;\n"+
		"a script's time includes the commands it calls, which are listed too; logging adds Redis\n"+
		"time of its own, so compare the rows with each other, not with srv µs/acq):")
	for _, t := range ts {
		parts := make([]string, len(t.Commands))
		for i, c := range t.Commands {
			parts[i] = fmt.Sprintf("%s %.2f/op %.1f µs (median %.0f)", c.Label, float64(c.Calls)/float64(t.N),
				float64(c.Mean.Nanoseconds())/1e3, float64(c.Median.Nanoseconds())/1e3)
		}
		fmt.Fprintf(out, "  %-16s  %-18s  %s\n", t.Scenario, t.Lib, strings.Join(parts, "; "))
	}
}
