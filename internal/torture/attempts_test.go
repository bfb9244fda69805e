package torture

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Attempts are counted where they leave the process: a go-redis hook sees
// every run of the acquire script (EVALSHA of its hash, or EVAL of its
// body after NOSCRIPT) and counts it for the Acquire whose context it
// carries. That is what a busy loop would show, whatever the limiter
// believes it does.

// acquireSHA is the hash of the acquire script as the limiter sends it
// by EVALSHA (its shared prelude, then its body:
// limiter/internal/redisstore/scripts.go). The test runs in its package's
// directory, so the scripts are at ../../limiter/internal/redisstore.
func acquireSHA() (string, error) {
	var body strings.Builder
	for _, f := range []string{"common.lua", "acquire.lua"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "limiter", "internal", "redisstore", f))
		if err != nil {
			return "", err
		}
		body.Write(b)
	}
	return sha(body.String()), nil
}

func sha(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// tally counts the acquire script calls of one Acquire.
type tally struct {
	calls atomic.Int64
	// busy: some node answered "no room" (queued or full), so the
	// request had to wait.
	busy atomic.Bool
}

type tallyKey struct{}

func withTally(ctx context.Context, t *tally) context.Context {
	return context.WithValue(ctx, tallyKey{}, t)
}

type attemptHook struct{ sha string }

func (attemptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h attemptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(ctx, cmd)
		return err
	}
}

// The limiter may send the script in a pipeline (with WAIT after it, for
// WaitReplicas).
func (h attemptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.count(ctx, cmd)
		}
		return err
	}
}

// count counts cmd, once answered, if it ran the acquire script for an
// Acquire that carries a tally.
func (h attemptHook) count(ctx context.Context, cmd redis.Cmder) {
	t, _ := ctx.Value(tallyKey{}).(*tally)
	if t == nil || !h.isAcquire(cmd.Args()) {
		return
	}
	t.calls.Add(1)
	if c, ok := cmd.(*redis.Cmd); ok && c.Err() == nil {
		// The reply starts with 1 for a grant, 0 for "no room".
		if v, _ := c.Slice(); len(v) > 0 && v[0] == int64(0) {
			t.busy.Store(true)
		}
	}
}

func (h attemptHook) isAcquire(args []any) bool {
	if len(args) < 2 {
		return false
	}
	name, _ := args[0].(string)
	arg, _ := args[1].(string)
	switch strings.ToLower(name) {
	case "fcall":
		return strings.HasPrefix(arg, "redsem_") && strings.HasSuffix(arg, "_acquire") // its function (limiter/scripts.go)
	case "evalsha":
		return arg == h.sha
	case "eval":
		return sha(arg) == h.sha
	}
	return false
}
