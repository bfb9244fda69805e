// Package scriptcall recognises, for tests, the go-redis commands that
// run one of redisstore's scripts, from the scripts' source files: tests
// that watch or fake a node's commands (limiter's hooks, quorum's fake
// nodes) know the scripts by name without redisstore exporting hooks.
package scriptcall

import (
	"crypto/sha1"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// Args returns the ARGV of a go-redis command when it runs the named
// script ("acquire", "release", "settoken", ...) by FCALL, EVALSHA or
// EVAL: calls are recognised by the script, not by how many arguments
// it has today. The library names a script's function
// redsem_<hash>_<name>; EVAL sends the prelude, begin_call and the body
// (redisstore's scripts.go), and EVALSHA that text's SHA1.
func Args(name string, args []any) (argv []any, ok bool) {
	if len(args) < 3 {
		return nil, false
	}
	arg, _ := args[1].(string)
	switch args[0] {
	case "fcall":
		ok = strings.HasPrefix(arg, "redsem_") && strings.HasSuffix(arg, "_"+name)
	case "evalsha":
		ok = arg == evalOf(name).sha
	case "eval":
		ok = arg == evalOf(name).text
	}
	keys, _ := args[2].(int)
	if !ok || len(args) < 3+keys {
		return nil, false
	}
	return args[3+keys:], true
}

type evalText struct{ text, sha string }

var texts sync.Map // script name -> evalText

// evalOf is what EVAL sends for the script name, read from its file.
func evalOf(name string) evalText {
	if v, ok := texts.Load(name); ok {
		return v.(evalText)
	}
	_, self, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(self), "..", "redisstore")
	common, err1 := os.ReadFile(filepath.Join(dir, "common.lua"))
	adapt, err2 := os.ReadFile(filepath.Join(dir, "adapt.lua"))
	body, err3 := os.ReadFile(filepath.Join(dir, name+".lua"))
	if err := errors.Join(err1, err2, err3); err != nil {
		panic(fmt.Sprint("scriptcall: ", err))
	}
	// The prelude (redisstore's scripts.go): common.lua, then adapt.lua.
	text := string(common) + string(adapt) + "begin_call()\n" + string(body)
	v := evalText{text, fmt.Sprintf("%x", sha1.Sum([]byte(text)))}
	texts.Store(name, v)
	return v
}
