package torture

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// observer is the independent record of a run, on a Redis the limiter
// never talks to. Every event takes the next number of one counter and,
// in the same script, is appended to one list, so the list is in the
// order the observer saw the events.
type observer struct {
	rdb  *redis.Client
	keys observerKeys
}

type observerKeys struct {
	Seq, Log, Ready, Go, Stop string
}

func newObserverKeys(run string) observerKeys {
	p := "torture:{" + run + "}:"
	return observerKeys{Seq: p + "seq", Log: p + "log", Ready: p + "ready", Go: p + "go", Stop: p + "stop"}
}

// note numbers an event and, unless rec is empty, logs it with its number
// and the observer's clock (µs, for diagnostics only) appended.
var note = redis.NewScript(`
local s = redis.call('INCR', KEYS[1])
if ARGV[1] ~= '' then
  local t = redis.call('TIME')
  redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. s .. ' ' .. t[1] .. string.format('%06d', tonumber(t[2])))
end
return s`)

func newObserver(addr string, keys observerKeys) *observer {
	// Generous timeouts: a record the observer misses makes the check
	// unsound, so a slow observer must not fail a worker.
	return &observer{rdb: redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}), keys: keys}
}

func (o *observer) note(ctx context.Context, rec string) (int64, error) {
	return note.Run(ctx, o.rdb, []string{o.keys.Seq, o.keys.Log}, rec).Int64()
}

// attempt numbers the start of an attempt, before it is sent.
func (o *observer) attempt(ctx context.Context) (int64, error) { return o.note(ctx, "") }

func (o *observer) grant(ctx context.Context, g record) error {
	_, err := o.note(ctx, fmt.Sprintf("G %d %s %d %d %d %d", g.proc, g.lease, g.weight, g.token, g.attempt, g.hold.Milliseconds()))
	return err
}

// end logs that proc stopped holding lease: 'R' before it releases it,
// 'L' when it was told of its loss.
func (o *observer) end(ctx context.Context, kind byte, proc int, lease string) error {
	_, err := o.note(ctx, fmt.Sprintf("%c %d %s", kind, proc, lease))
	return err
}

// kill logs that proc is dead: it holds nothing from here on.
func (o *observer) kill(ctx context.Context, proc int) error {
	_, err := o.note(ctx, fmt.Sprintf("K %d", proc))
	return err
}

// read returns the log from index from on.
func (o *observer) read(ctx context.Context, from int64) ([]record, error) {
	lines, err := o.rdb.LRange(ctx, o.keys.Log, from, -1).Result()
	if err != nil {
		return nil, err
	}
	recs := make([]record, 0, len(lines))
	for _, l := range lines {
		r, err := parseRecord(l)
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// record is one event of the log.
type record struct {
	kind   byte // 'G'rant, 'R'elease, 'L'oss notice, 'K'ill
	seq    int64
	at     int64 // the observer's clock, µs: for diagnostics, never checked
	proc   int
	lease  string
	weight int64
	token  int64
	// attempt is the number taken just before the granted request was
	// sent.
	attempt int64
	hold    time.Duration // how long the holder meant to hold
}

func parseRecord(line string) (record, error) {
	f := strings.Fields(line)
	var r record
	var lease string
	var nums []string // proc first, then seq and time last
	switch {
	case len(f) == 9 && f[0] == "G":
		lease, nums = f[2], append([]string{f[1]}, f[3:]...)
	case len(f) == 5 && (f[0] == "R" || f[0] == "L"):
		lease, nums = f[2], []string{f[1], f[3], f[4]}
	case len(f) == 4 && f[0] == "K":
		nums = f[1:]
	default:
		return r, fmt.Errorf("torture: bad log record %q", line)
	}
	n := make([]int64, len(nums))
	for i, s := range nums {
		var err error
		if n[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return r, fmt.Errorf("torture: bad log record %q: %v", line, err)
		}
	}
	r = record{kind: f[0][0], proc: int(n[0]), lease: lease, seq: n[len(n)-2], at: n[len(n)-1]}
	if r.kind == 'G' {
		r.weight, r.token, r.attempt, r.hold = n[1], n[2], n[3], time.Duration(n[4])*time.Millisecond
	}
	return r, nil
}
