package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// checkVersion: on Redis 7+ acquire, release and resume run as functions,
// which cost Redis about a sixth less than EVALSHA; without them (older
// Redis, or an ACL that refuses FCALL or FUNCTION LOAD) the limiter falls
// back to EVALSHA, which works: a warning.
func checkVersion(ctx context.Context, n *node, _ checkEnv) finding {
	const name = "version"
	if n.infoErr != nil {
		return infoRefused(n, name)
	}
	v := n.info["redis_version"]
	f := finding{Node: n.addr, Check: name, Status: statusWarn}
	if major, _, _ := strings.Cut(v, "."); atoi(major) < 7 {
		f.Found = fmt.Sprintf("Redis %s: no functions, so the limiter runs every script by EVALSHA", v)
		f.Advice = "Redis 7 or later runs acquire and release as functions, for less Redis time"
		return f
	}
	if refused := functionsRefused(ctx, n); len(refused) > 0 {
		f.Found = fmt.Sprintf("Redis %s, but the ACL refuses %s: the limiter falls back to EVALSHA", v, strings.Join(refused, " and "))
		f.Advice = "grant +fcall +function|load to redsem's user"
		return f
	}
	f.Status = statusOK
	f.Found = fmt.Sprintf("Redis %s: functions can load and run", v)
	return f
}

// functionsRefused probes FCALL and FUNCTION LOAD with calls that cannot
// succeed: an ACL refuses a command before it runs, so NOPERM tells a
// refusal, and any other error that the user may run it.
func functionsRefused(ctx context.Context, n *node) []string {
	var refused []string
	if isNoPerm(n.rdb.Do(ctx, "fcall", "redsem_doctor_no_such_function", 0).Err()) {
		refused = append(refused, "FCALL")
	}
	if isNoPerm(n.rdb.Do(ctx, "function", "load", "").Err()) { // no library header: loads nothing
		refused = append(refused, "FUNCTION LOAD")
	}
	return refused
}

func isNoPerm(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOPERM")
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// checkQuarantine: a server younger than the longest TTL refuses grants on
// names it has no state for (the restart quarantine), so an Acquire there
// waits. Expected after every start: a warning, with when it ends. The
// limiter counts the uptime one second short (INFO rounds it), as here.
func checkQuarantine(_ context.Context, n *node, env checkEnv) finding {
	const name = "quarantine"
	if n.infoErr != nil {
		return infoRefused(n, name)
	}
	up := time.Duration(atoi(n.info["uptime_in_seconds"])) * time.Second
	f := finding{Node: n.addr, Check: name, Status: statusOK}
	left := env.ttl - (up - time.Second)
	if left <= 0 {
		f.Found = fmt.Sprintf("up %v, longer than -ttl %v: grants on new names are not held back", up, env.ttl)
		return f
	}
	f.Status = statusWarn
	f.Found = fmt.Sprintf("up only %v: in its restart quarantine (-ttl %v), it grants nothing on names it has no state for until %s (in %v)",
		up, env.ttl, time.Now().Add(left).Format(time.RFC3339), left)
	f.Advice = "nothing to do: Acquire waits it out; on a server nobody used before, limiter.RestartQuarantine(0) skips it"
	return f
}
