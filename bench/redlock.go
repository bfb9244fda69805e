package main

// The Redlock table (-redlock): redsem's Redlock Client next to redsync's
// Redlock (redsync.New over one pool per node), over 3 independent
// redis-servers, with every node up and then with one stopped (refusing
// connections): what a dead node costs each library, in worker processes.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/redsem/redsem/limiter"
)

// RedlockScenario is the multi-process mutex scenario on 3 nodes.
var RedlockScenario = MultiScenario{Name: "redlock 3 nodes, 8 procs x 1, mutex, 2ms pause", Procs: 8, Goroutines: 1,
	Limit: 1, Hold: time.Millisecond, Pause: 2 * time.Millisecond}

// RedlockLibs are the libraries of the Redlock table; workers find them by
// name, as they find MultiLibs.
var RedlockLibs = []MultiLib{
	{Lib: Lib{Name: "redsem redlock", Config: "NewRedlock over 3 nodes, Mutex Acquire + Release; TTL 10s", New: redsemRedlock},
		Mutex: true},
	{Lib: Lib{Name: "redsync redlock", Config: "redsync.New over 3 pools, Lock, WithRetryDelay(10ms), WithTries(1000); WithExpiry(10s)",
		New: redsyncRedlock(redsync.WithExpiry(lockTTL), redsync.WithRetryDelay(10*time.Millisecond), redsync.WithTries(1000))},
		Mutex: true},
}

// redsemRedlock is the mutex named key of p's Redlock Client.
func redsemRedlock(p *Proc, key string) (Locker, error) {
	c, err := p.Redlock()
	if err != nil {
		return nil, err
	}
	m, err := c.Mutex(key, limiter.TTL(lockTTL))
	if err != nil {
		return nil, err
	}
	return redsemLocker(m.Acquire), nil
}

// redsyncRedlock is redsync's Redlock over p's nodes.
func redsyncRedlock(opts ...redsync.Option) func(*Proc, string) (Locker, error) {
	return redsyncOn(func(p *Proc) []redsyncredis.Pool {
		var pools []redsyncredis.Pool
		for _, n := range p.Nodes {
			pools = append(pools, goredis.NewPool(n))
		}
		return pools
	}, opts...)
}

// redlockRow is one library in one state of the nodes.
type redlockRow struct {
	state  string
	lib    MultiLib
	rounds []MultiStats
}

// runRedlock starts two more nodes beside env's, runs every library
// rounds times with all three up, stops the third, and runs them again.
func runRedlock(ctx context.Context, env *Env, rounds int, dur time.Duration) ([]redlockRow, error) {
	if os.Getenv("REDIS_ADDR") != "" {
		return nil, errors.New("-redlock starts its own nodes: unset REDIS_ADDR")
	}
	nodes := []*redisServer{}
	defer func() {
		for _, n := range nodes {
			n.Stop()
		}
	}()
	for range 2 {
		n, err := startRedis()
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	env.Nodes = []string{env.Addr, nodes[0].Addr, nodes[1].Addr}
	defer func() { env.Nodes = nil }()
	var rows []redlockRow
	for _, state := range []string{"all 3 up", "node 3 stopped"} {
		if state == "node 3 stopped" {
			nodes[1].Stop()
		}
		first := len(rows)
		for _, lib := range RedlockLibs {
			rows = append(rows, redlockRow{state: state, lib: lib})
		}
		for round := range rounds {
			for k := range RedlockLibs {
				row := &rows[first+(k+round)%len(RedlockLibs)]
				r, err := RunMulti(ctx, env, RedlockScenario, row.lib, MultiOpts{Duration: dur})
				if err != nil {
					return nil, fmt.Errorf("%s, %s, round %d: %w", state, row.lib.Name, round+1, err)
				}
				s := r.Analyze()
				fmt.Fprintf(os.Stderr, "redlock: %s, %s, round %d: %d acquisitions, %.0f/s, peak %d\n",
					state, row.lib.Name, round+1, s.N, s.AcqPerSec(), s.Peak)
				row.rounds = append(row.rounds, s)
			}
		}
	}
	return rows, nil
}

// printRedlock prints the medians, each state's ratio to all nodes up, and
// redsem's to redsync.
func printRedlock(out io.Writer, rows []redlockRow, rounds int, dur time.Duration) {
	fmt.Fprintf(out, "\nRedlock: %s; %d rounds of %v, libraries alternating; medians\n", RedlockScenario.Name, rounds, dur)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\tlibrary\tacq/s\twait p99 ms\twait max ms\tpeak/limit\t×all up\t×redsync\t")
	healthy := map[string]float64{}
	byState := map[string]float64{}
	for _, r := range rows {
		acq := medianOf(r.rounds, MultiStats.AcqPerSec)
		if r.state == "all 3 up" {
			healthy[r.lib.Name] = acq
		}
		byState[r.state+"/"+r.lib.Name] = acq
	}
	for _, r := range rows {
		acq := byState[r.state+"/"+r.lib.Name]
		peak := slices.MaxFunc(r.rounds, func(a, b MultiStats) int { return int(a.Peak - b.Peak) }).Peak
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.1f\t%.1f\t%d/1\t%.2f\t%.2f\t\n", r.state, r.lib.Name, acq,
			medianOf(r.rounds, func(s MultiStats) float64 { return msOf(s.WaitP99) }),
			medianOf(r.rounds, func(s MultiStats) float64 { return msOf(s.WaitMax) }),
			peak, acq/healthy[r.lib.Name], acq/byState[r.state+"/redsync redlock"])
	}
	_ = tw.Flush()
	for _, l := range RedlockLibs {
		fmt.Fprintf(out, "  %-16s %s\n", l.Name, l.Config)
	}
}

func medianOf(rounds []MultiStats, v func(MultiStats) float64) float64 {
	vs := make([]float64, len(rounds))
	for i, r := range rounds {
		vs[i] = v(r)
	}
	sort.Float64s(vs)
	return vs[len(vs)/2]
}
