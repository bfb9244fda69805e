package redisstore

import (
	"context"
	"errors"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter/internal/store"
)

// sendWay is how a script call is sent. A call goes the store's first way
// (firstWay) and, when the server lacked what that way needs, the next
// (nextWay): such an error comes before the script ran, so no call runs
// twice. eval, the WaitReplicas pipeline (replicated) and the refresh
// pipeline all go this one way, and every script goes through eval or
// one of those pipelines.
type sendWay int

const (
	byFunction       sendWay = iota // FCALL of its function in the library
	byLoadedFunction                // FCALL again, the library loaded since
	bySHA                           // EVALSHA
	byText                          // EVAL
)

// firstWay is FCALL, or EVALSHA for a script outside the library or once
// this server refused functions.
func (s *Store) firstWay(sc luaScript) sendWay {
	if off := s.functionsOff.Load(); sc.fn == nil || off != 0 && time.Now().UnixNano() < off {
		return bySHA
	}
	return byFunction
}

// scriptCmd is the command that runs sc sent way (firstWay or nextWay of
// it); args are built by evalArgs, and their head is overwritten.
func scriptCmd(ctx context.Context, sc luaScript, way sendWay, args []any) *redis.Cmd {
	switch {
	case way < bySHA:
		args[0], args[1] = "fcall", sc.fn
	case way == byText:
		args[0], args[1] = "eval", sc.text
	default:
		args[0], args[1] = "evalsha", sc.sha
	}
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// lacks reports whether err, the answer to a call sent way, says the
// server lacked what that way needs.
func lacks(way sendWay, err error) bool {
	if way < bySHA {
		return isNoFunction(err)
	}
	return way == bySHA && isNoScript(err)
}

// nextWay returns the way to send a call again after the server answered
// it err, sent way when loads library loads had been tried, and whether to
// send it again: FCALL once more after loading the library, EVALSHA when
// the server cannot take functions, EVAL when it lacked the script.
func (s *Store) nextWay(ctx context.Context, way sendWay, err error, loads uint64) (sendWay, bool) {
	if !lacks(way, err) {
		return way, false
	}
	switch way {
	case byFunction:
		if s.loadFunctions(ctx, err, loads) {
			return byLoadedFunction, true
		}
		return bySHA, true
	case byLoadedFunction:
		return bySHA, true
	}
	return byText, true
}

// isNoFunction: FCALL did not run because the server lacks the function
// (restarted, flushed, or never given it), the command (Redis before 7)
// or the permission (an ACL).
func isNoFunction(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "Function not found") || isRefused(err))
}

// isRefused: the server will not run the command itself, whatever its
// arguments: unknown to it, or refused by an ACL. An ACL's refusal of a
// key ("no permissions to access ... key") is the call's own error, and
// EVALSHA would meet it alike.
func isRefused(err error) bool {
	return redis.HasErrorPrefix(err, "unknown command") ||
		redis.HasErrorPrefix(err, "NOPERM") && strings.Contains(err.Error(), "command")
}

// loadFunctions loads the library on every master that may serve a key
// (a Cluster's or a Ring's every one: which node FCALL reached is not
// known here), after FCALL failed with callErr, sent when loads loads had
// been tried. It reports whether FCALL may now succeed: a load tried since
// then (another call's) answers for this one. A server that refused FCALL
// or FUNCTION LOAD is not asked again.
func (s *Store) loadFunctions(ctx context.Context, callErr error, loads uint64) bool {
	if isRefused(callErr) {
		s.functionsOff.Store(math.MaxInt64)
		return false
	}
	select {
	case s.loading <- struct{}{}:
		defer func() { <-s.loading }()
	case <-ctx.Done():
		return false
	}
	if s.loads.Load() != loads {
		return s.loaded.Load()
	}
	err := s.dep.masters(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		return c.FunctionLoadReplace(ctx, functions).Err()
	})
	var answered redis.Error
	switch {
	case isRefused(err):
		s.functionsOff.Store(math.MaxInt64)
	case errors.As(err, &answered):
		s.functionsOffUntil(time.Now().Add(loadRetry).UnixNano())
	case err == nil:
		s.functionsOffUntil(0)
	}
	s.loaded.Store(err == nil)
	s.loads.Add(1)
	return err == nil
}

// functionsOffUntil sets functionsOff to t (Unix ns; 0: FCALL again)
// unless a refusal set it for ever.
func (s *Store) functionsOffUntil(t int64) {
	if old := s.functionsOff.Load(); old != math.MaxInt64 {
		s.functionsOff.CompareAndSwap(old, t)
	}
}

// loadRetry is how long calls go by EVALSHA after the server answered a
// library load with an error.
const loadRetry = time.Minute

func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// evalArgs starts the command that runs sc on k (scriptCmd writes its
// head), with room for n arguments: one allocation, where Script.Run makes
// a variadic slice and the command's and boxes the hash and keys.
func evalArgs(sc luaScript, k store.Keyspace, n int) []any {
	args := make([]any, 3, 3+len(k.Keys)+n)
	args[0], args[1], args[2] = "evalsha", sc.sha, len(k.Keys)
	return append(args, k.Args...)
}

// eval runs sc once on the node of k, args being built by evalArgs: sent
// the first way this server takes (send.go), with its first key marked for
// routing (a ClusterClient sends it to that key's slot). With w on, it
// is followed by WAIT (evalWaited).
func (s *Store) eval(ctx context.Context, sc luaScript, k store.Keyspace, w store.ReplicaWait, args []any) (cmd *redis.Cmd, acked int, waitErr error) {
	if w.On() {
		return s.evalWaited(ctx, k, w, sc, args[3+len(k.Keys):]...)
	}
	addr := s.clusterAddr(ctx, k.ID())
	for way := s.firstWay(sc); ; {
		loads := s.loads.Load()
		cmd = scriptCmd(ctx, sc, way, args)
		if err := s.admit(addr); err != nil {
			cmd.SetErr(err)
			return cmd, 0, nil
		}
		_ = s.rdb.Process(ctx, cmd)
		s.observe(ctx, addr, cmd.Err())
		var again bool
		if way, again = s.nextWay(ctx, way, cmd.Err(), loads); !again {
			return cmd, 0, nil
		}
	}
}

// run runs sc once on k with args, as eval does: the way every script
// outside the hot paths is sent.
func (s *Store) run(ctx context.Context, sc luaScript, k store.Keyspace, args ...any) *redis.Cmd {
	cmd, _, _ := s.eval(ctx, sc, k, store.ReplicaWait{}, append(evalArgs(sc, k, len(args)), args...))
	return cmd
}
