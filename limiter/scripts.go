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

	acquireScript  = redis.NewScript(commonLua + acquireLua)
	refreshScript  = redis.NewScript(commonLua + refreshLua)
	releaseScript  = redis.NewScript(commonLua + releaseLua)
	leaveScript    = redis.NewScript(commonLua + leaveLua)
	resumeScript   = redis.NewScript(commonLua + resumeLua)
	holdersScript  = redis.NewScript(commonLua + holdersLua)
	setTokenScript = redis.NewScript(commonLua + setTokenLua)
	setLimitScript = redis.NewScript(commonLua + setLimitLua)
	waitersScript  = redis.NewScript(commonLua + waitersLua)
)

// The hashes of the scripts redisStore.run sends, boxed once.
var acquireSha, releaseSha any = acquireScript.Hash(), releaseScript.Hash()
