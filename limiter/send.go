package limiter

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// sendWay is how a script call is sent. A call goes the store's first way
// (firstWay) and, when the server lacked what that way needs, the next
// (nextWay): such an error comes before the script ran, so no call runs
// twice. eval, the WaitReplicas pipeline (replicated) and the refresh
// pipeline all go this one way.
type sendWay int

const (
	byFunction       sendWay = iota // FCALL of its function in the library
	byLoadedFunction                // FCALL again, the library loaded since
	bySHA                           // EVALSHA
	byText                          // EVAL
)

// firstWay is FCALL, or EVALSHA once this server refused functions.
func (s *redisStore) firstWay() sendWay {
	if s.noFunctions.Load() {
		return bySHA
	}
	return byFunction
}

// scriptCmd is the command that runs sc sent way; args are built by
// evalArgs, and their head is overwritten. A script outside the library
// goes by EVALSHA instead of FCALL.
func scriptCmd(ctx context.Context, sc luaScript, way sendWay, args []any) *redis.Cmd {
	switch {
	case way < bySHA && sc.fn != nil:
		args[0], args[1] = "fcall", sc.fn
	case way == byText:
		args[0], args[1] = "eval", commonLua+sc.body
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
func (s *redisStore) nextWay(ctx context.Context, way sendWay, err error, loads uint64) (sendWay, bool) {
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
func (s *redisStore) loadFunctions(ctx context.Context, callErr error, loads uint64) bool {
	if isRefused(callErr) {
		s.noFunctions.Store(true)
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
	load := func(ctx context.Context, c *redis.Client) error {
		return c.FunctionLoadReplace(ctx, functions).Err()
	}
	var err error
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, load)
	case *redis.Ring:
		err = c.ForEachShard(ctx, load)
	default:
		err = s.rdb.FunctionLoadReplace(ctx, functions).Err()
	}
	if isRefused(err) {
		s.noFunctions.Store(true)
	}
	s.loaded.Store(err == nil)
	s.loads.Add(1)
	return err == nil
}

func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }
