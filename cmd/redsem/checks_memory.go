package main

import (
	"context"
	"fmt"
	"strings"
)

// checkEviction: an evicted key forgets its holders and their permits are
// granted again while they still work. volatile-* policies evict redsem's
// keys as well, since every key carries a TTL.
func checkEviction(_ context.Context, n *node, _ checkEnv) finding {
	const name = "eviction"
	if n.infoErr != nil {
		return infoRefused(n, name)
	}
	f := finding{Node: n.addr, Check: name, Status: statusOK}
	maxmem, policy := n.info["maxmemory"], n.info["maxmemory_policy"]
	switch {
	case maxmem == "" || maxmem == "0":
		f.Found = fmt.Sprintf("no maxmemory (policy %s): nothing is evicted", policy)
	case policy == "noeviction":
		f.Found = fmt.Sprintf("maxmemory %s with noeviction: full, Redis refuses new grants but forgets none", n.info["maxmemory_human"])
	default:
		f.Status = statusError
		f.Found = fmt.Sprintf("maxmemory %s with maxmemory-policy %s: an evicted key forgets its holders, and their permits go to others while they still work", n.info["maxmemory_human"], policy)
		f.Advice = "CONFIG SET maxmemory-policy noeviction (and in redis.conf), or give redsem a Redis of its own; limiter Clients refuse such a server unless given AllowEviction"
	}
	return f
}

// checkPersistence says what a restart forgets. A server restarted empty
// is covered by the restart quarantine; one that restarts from a stale
// snapshot or AOF is not, for names that still have state. Never an error:
// each setting is a trade-off the operator chose.
func checkPersistence(ctx context.Context, n *node, env checkEnv) finding {
	const name = "persistence"
	if n.infoErr != nil {
		return infoRefused(n, name)
	}
	f := finding{Node: n.addr, Check: name, Status: statusWarn}
	save, saveErr := configGet(ctx, n, "save")
	switch {
	case n.info["aof_enabled"] == "1":
		return aofFinding(ctx, n, f)
	case saveErr == nil && strings.TrimSpace(save) != "":
		f.Found = fmt.Sprintf("RDB snapshots only (save %q): a restart brings back the last snapshot and forgets the grants since on names that still have state; the restart quarantine does not see those", save)
		f.Advice = "appendonly yes with appendfsync always where a lost grant matters, or Redlock over independent nodes"
	case saveErr != nil:
		f.Found = fmt.Sprintf("no AOF; whether RDB snapshots are taken is unknown (CONFIG GET save: %v): a restart forgets the latest grants or every lease", saveErr)
		f.Advice = "appendonly yes with appendfsync always where a lost grant matters"
	default:
		f.Found = fmt.Sprintf("none: a restart forgets every lease; new names then wait out the restart quarantine (%v after the start) so that forgotten holders run out first", env.ttl)
		f.Advice = "keep limiter.RestartQuarantine at the longest TTL in use (the default is the TTL); appendonly yes with appendfsync always makes a restart forget nothing"
	}
	return f
}

// aofFinding grades an AOF by its fsync policy: only always loses no
// acknowledged grant in a crash.
func aofFinding(ctx context.Context, n *node, f finding) finding {
	fsync, err := configGet(ctx, n, "appendfsync")
	switch {
	case err != nil:
		f.Found = fmt.Sprintf("AOF on, appendfsync unknown (CONFIG GET: %v)", err)
		f.Advice = "check that appendfsync is always; with everysec a crash forgets up to a second of grants"
	case fsync == "always":
		f.Status = statusOK
		f.Found = "AOF with appendfsync always: a restart forgets no grant"
		f.Advice = "limiter.RestartQuarantine(0) is safe against this server"
	default:
		f.Found = fmt.Sprintf("AOF with appendfsync %s: a crash forgets the latest grants (about a second with everysec) on names that still have state; the restart quarantine does not see those", fsync)
		f.Advice = "appendfsync always where a lost grant matters, or Redlock over independent nodes"
	}
	return f
}

// configGet reads one CONFIG parameter; ACLs often refuse CONFIG.
func configGet(ctx context.Context, n *node, param string) (string, error) {
	m, err := n.rdb.ConfigGet(ctx, param).Result()
	if err != nil {
		return "", err
	}
	v, ok := m[param]
	if !ok {
		return "", fmt.Errorf("no parameter %s", param)
	}
	return v, nil
}
