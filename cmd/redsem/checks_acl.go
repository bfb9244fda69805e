package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// aclCommand is a command the limiter sends, with representative
// arguments: a key and a channel under the prefix, as the limiter's.
type aclCommand struct {
	name     string
	args     []string
	optional bool // refused, the limiter falls back: a warning
}

// aclCommands are the commands of the README's ACL line, plus WAIT with
// -wait-replicas and CLUSTER SLOTS on a Cluster (go-redis reads the slot
// map with it).
func aclCommands(env checkEnv) []aclCommand {
	key, ch := env.prefix+"{doctor}", env.prefix+"doctor"
	cs := []aclCommand{
		{name: "fcall", args: []string{"fcall", "f", "1", key}, optional: true},
		{name: "function|load", args: []string{"function", "load", "x"}, optional: true},
		{name: "evalsha", args: []string{"evalsha", strings.Repeat("0", 40), "1", key}},
		{name: "eval", args: []string{"eval", "return 1", "1", key}},
		{name: "info", args: []string{"info", "server"}},
		{name: "scan", args: []string{"scan", "0"}},
		{name: "subscribe", args: []string{"subscribe", ch}},
		{name: "publish", args: []string{"publish", ch, "m"}},
		{name: "ping", args: []string{"ping"}},
		{name: "time", args: []string{"time"}},
	}
	for _, c := range []string{"hget", "hmget", "hdel", "zrem", "zscore", "zmscore"} {
		cs = append(cs, aclCommand{name: c, args: []string{c, key, "f"}})
	}
	for _, c := range []string{"hset", "hincrby", "zadd"} {
		cs = append(cs, aclCommand{name: c, args: []string{c, key, "1", "1"}})
	}
	for _, c := range []string{"zrange", "zrangebyscore", "zrevrangebyscore"} {
		cs = append(cs, aclCommand{name: c, args: []string{c, key, "0", "1"}})
	}
	cs = append(cs, aclCommand{name: "pexpireat", args: []string{"pexpireat", key, "1"}},
		aclCommand{name: "persist", args: []string{"persist", key}},
		aclCommand{name: "get", args: []string{"get", key}},
		aclCommand{name: "set", args: []string{"set", key, "1"}},
		aclCommand{name: "del", args: []string{"del", key}},
		aclCommand{name: "mget", args: []string{"mget", key}})
	if env.waitReplicas > 0 {
		cs = append(cs, aclCommand{name: "wait", args: []string{"wait", "1", "0"}})
	}
	if env.kind == "cluster" {
		// Wake-ups stay in the name's shard (sharded pub/sub); a Client
		// refused SSUBSCRIBE falls back to plain channels, but a release
		// refused SPUBLISH fails.
		shardCh := key + ":wake:doctor"
		cs = append(cs, aclCommand{name: "cluster|slots", args: []string{"cluster", "slots"}},
			aclCommand{name: "ssubscribe", args: []string{"ssubscribe", shardCh}, optional: true},
			aclCommand{name: "spublish", args: []string{"spublish", shardCh, "m"}})
	}
	return cs
}

// checkACL asks whether the connected user may send each command: by ACL
// DRYRUN (Redis 7) when the user may run it, else from inside a script
// with redis.acl_check_cmd, which needs only EVAL. Neither runs the
// command.
func checkACL(ctx context.Context, n *node, env checkEnv) finding {
	f := finding{Node: n.addr, Check: "acl", Status: statusOK}
	cs := aclCommands(env)
	refused, how, err := refusedByDryRun(ctx, n, cs)
	if err != nil {
		refused, how, err = refusedByScript(ctx, n, cs)
	}
	if err != nil {
		f.Status = statusWarn
		f.Found = fmt.Sprintf("cannot tell: ACL DRYRUN and redis.acl_check_cmd both failed (%v)", err)
		f.Advice = "check the user against the README's ACL line by hand (Redis 6), or run doctor as a user allowed ACL DRYRUN"
		return f
	}
	return aclFinding(f, cs, refused, how)
}

// aclFinding grades the refused commands: any that the limiter cannot do
// without is an error.
func aclFinding(f finding, cs []aclCommand, refused map[string]bool, how string) finding {
	var names []string
	for _, c := range cs {
		if !refused[c.name] {
			continue
		}
		names = append(names, c.name)
		switch {
		case !c.optional:
			f.Status = statusError
		case f.Status == statusOK:
			f.Status = statusWarn
		}
	}
	if len(names) == 0 {
		f.Found = fmt.Sprintf("the user may run all %d commands the limiter sends (%s)", len(cs), how)
		return f
	}
	f.Found = fmt.Sprintf("the user may not run: %s (%s)", strings.Join(names, " "), how)
	f.Advice = "grant +" + strings.Join(names, " +") + " as in the README's ACL line"
	if f.Status == statusWarn {
		f.Advice += " (without them the limiter runs its scripts by EVALSHA)"
	}
	return f
}

// refusedByDryRun asks ACL DRYRUN for the connected user. It fails when
// the user may not run it, or before Redis 7.
func refusedByDryRun(ctx context.Context, n *node, cs []aclCommand) (map[string]bool, string, error) {
	user := n.rdb.Options().Username
	if user == "" {
		user = "default"
	}
	refused := make(map[string]bool)
	for _, c := range cs {
		args := append([]any{"acl", "dryrun", user}, anys(c.args)...)
		reply, err := n.rdb.Do(ctx, args...).Text()
		if err != nil {
			return nil, "", err
		}
		refused[c.name] = reply != "OK"
	}
	return refused, "ACL DRYRUN " + user, nil
}

// aclCheckScript returns the names of the commands the user may not run;
// ARGV holds, per command, its name, its argument count and arguments.
var aclCheckScript = redis.NewScript(`
local refused, i = {}, 1
while i <= #ARGV do
  local n = tonumber(ARGV[i + 1])
  if not redis.acl_check_cmd(unpack(ARGV, i + 2, i + 1 + n)) then
    table.insert(refused, ARGV[i])
  end
  i = i + 2 + n
end
return refused`)

// refusedByScript asks redis.acl_check_cmd (Redis 7) inside a script.
func refusedByScript(ctx context.Context, n *node, cs []aclCommand) (map[string]bool, string, error) {
	var argv []any
	for _, c := range cs {
		argv = append(append(argv, c.name, len(c.args)), anys(c.args)...)
	}
	names, err := aclCheckScript.Eval(ctx, n.rdb, nil, argv...).StringSlice()
	if err != nil {
		return nil, "", err
	}
	refused := make(map[string]bool)
	for _, name := range names {
		refused[name] = true
	}
	return refused, "redis.acl_check_cmd", nil
}

func anys(ss []string) []any {
	as := make([]any, len(ss))
	for i, s := range ss {
		as[i] = s
	}
	return as
}
