package main

// Where a fleet run's limiter commands go: the workers count what they
// send by command (an FCALL by its function and the rule its first key
// names), the parent reads INFO commandstats (a script's inner commands
// included) before and after. Printed as a note under the fleet table.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// cmdCounts counts commands by label.
type cmdCounts struct {
	mu sync.Mutex
	n  map[string]int64
}

func (c *cmdCounts) add(label string) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	c.n[label]++
	c.mu.Unlock()
}

func (c *cmdCounts) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

func (c *cmdCounts) reset() {
	c.mu.Lock()
	c.n = nil
	c.mu.Unlock()
}

// cmdLabel is "fcall <function> <rule>" for an FCALL (the rule: the part
// of its first key that names it, as "{partner-api}"), else the command.
func cmdLabel(cmd redis.Cmder) string {
	args := cmd.Args()
	name := strings.ToLower(cmd.Name())
	if name != "fcall" && name != "fcall_ro" || len(args) < 2 {
		return name
	}
	label := "fcall " + fmt.Sprint(args[1])
	if len(args) >= 4 {
		if n, _ := strconv.Atoi(fmt.Sprint(args[2])); n > 0 {
			label += " " + ruleOfKey(fmt.Sprint(args[3]))
		}
	}
	return label
}

// outcome is an acquire's kind and answer: "try"/"wait" (ARGV[8], the
// queue id, empty or not), and granted, refused, or the error.
func outcome(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 2 || !strings.HasSuffix(fmt.Sprint(args[1]), "_acquire") {
		return ""
	}
	kind := "wait"
	if n, _ := strconv.Atoi(fmt.Sprint(args[2])); len(args) > 3+n+7 && fmt.Sprint(args[3+n+7]) == "" {
		kind = "try"
	}
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return " " + kind
	}
	v, err := c.Result()
	if err != nil {
		return " " + kind + " err"
	}
	if r, ok := v.([]any); ok && len(r) > 0 {
		switch fmt.Sprint(r[0]) {
		case "1":
			return " " + kind + " granted"
		case "0":
			return " " + kind + " refused"
		}
		return " " + kind + " " + fmt.Sprint(r[0])
	}
	return " " + kind
}

// ruleOfKey keeps a key's hash tag, or its second part.
func ruleOfKey(k string) string {
	if i := strings.IndexByte(k, '{'); i >= 0 {
		if j := strings.IndexByte(k[i:], '}'); j > 0 {
			return k[i : i+j+1]
		}
	}
	return k
}

// labelHook counts every command sent by label.
type labelHook struct{ c *cmdCounts }

func (h labelHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h labelHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if !setupCmd(cmd.Name()) {
			h.c.add(cmdLabel(cmd) + outcome(cmd))
		}
		return err
	}
}

func (h labelHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if !setupCmd(c.Name()) {
				h.c.add(cmdLabel(c))
			}
		}
		return next(ctx, cmds)
	}
}

// readCommandstats is INFO commandstats' calls per command.
func readCommandstats(ctx context.Context, rdb *redis.Client) (map[string]int64, error) {
	stats, err := readCommandStats(ctx, rdb)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(stats))
	for name, st := range stats {
		out[name] = st.calls
	}
	return out, nil
}

// perTask formats counts per task done, largest first, those under 0.05
// left out.
func perTask(m map[string]int64, done int) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return int(m[b] - m[a]) })
	var parts []string
	for _, k := range keys {
		v := float64(m[k]) / float64(done)
		if v < 0.05 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", k, v))
	}
	return strings.Join(parts, ", ")
}
