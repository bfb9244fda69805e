package limiter

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// Every script is the shared prelude followed by its body, so the helpers
// (sweep, the queue walk, key expiry) exist once. Scripts run by EVALSHA
// and fall back to EVAL on NOSCRIPT (redis.Script.Run), which also covers
// a restarted or failed-over server that lost its script cache.
var (
	//go:embed common.lua
	commonLua string
	//go:embed acquire.lua
	acquireLua string
	//go:embed refresh.lua
	refreshLua string
	//go:embed release.lua
	releaseLua string
	//go:embed leave.lua
	leaveLua string
	//go:embed resume.lua
	resumeLua string
	//go:embed holders.lua
	holdersLua string
	//go:embed settoken.lua
	setTokenLua string
	//go:embed setlimit.lua
	setLimitLua string
	//go:embed waiters.lua
	waitersLua string

	acquireScript  = newScript(acquireLua)
	refreshScript  = newScript(refreshLua)
	releaseScript  = newScript(releaseLua)
	leaveScript    = newScript(leaveLua)
	resumeScript   = newScript(resumeLua)
	holdersScript  = newScript(holdersLua)
	setTokenScript = newScript(setTokenLua)
	setLimitScript = newScript(setLimitLua)
	waitersScript  = newScript(waitersLua)
)

// luaScript is a script with its hash boxed once: an interface holding a
// string allocates, and acquire and release send theirs on every call.
type luaScript struct {
	*redis.Script
	sha any
}

func newScript(body string) luaScript {
	sc := redis.NewScript(commonLua + body)
	return luaScript{sc, sc.Hash()}
}
