package redisstore

// Test hooks: limiter's tests watch the commands a Client sends and load
// another version's library; they know the scripts only through these.

// ScriptCall returns the ARGV of a go-redis command when it runs the
// named script ("acquire", "release" or "settoken") by FCALL, EVALSHA or
// EVAL: tests recognise calls by the script, not by how many arguments it
// has today.
func ScriptCall(name string, args []any) (argv []any, ok bool) {
	sc, known := map[string]luaScript{"acquire": acquireScript, "release": releaseScript, "settoken": setTokenScript}[name]
	if !known || len(args) < 3 {
		return nil, false
	}
	switch args[0] {
	case "fcall":
		ok = args[1] == sc.fn
	case "evalsha":
		ok = args[1] == sc.sha
	case "eval":
		ok = args[1] == sc.text
	}
	keys, _ := args[2].(int)
	if !ok || len(args) < 3+keys {
		return nil, false
	}
	return args[3+keys:], true
}
