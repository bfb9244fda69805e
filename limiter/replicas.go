package limiter

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// replicaWait is what WaitReplicas asks for: WAIT n timeout after each
// script that grants or extends a lease.
type replicaWait struct {
	n       int
	timeout time.Duration
}

func (w replicaWait) on() bool { return w.n > 0 }

// stricter is the wait that satisfies both w and o: one WAIT serves every
// lease of a refresh batch.
func (w replicaWait) stricter(o replicaWait) replicaWait {
	return replicaWait{n: max(w.n, o.n), timeout: max(w.timeout, o.timeout)}
}

// confirm returns nil when w asks nothing or acked replicas (WAIT's
// answer; waitErr its failure) are enough, else the *ReplicationError.
func (w replicaWait) confirm(op, name string, acked int, waitErr error) error {
	if !w.on() || (waitErr == nil && acked >= w.n) {
		return nil
	}
	return &ReplicationError{Name: name, Op: op, Want: w.n, Acked: acked, Timeout: w.timeout, Err: waitErr}
}

// canWait says whether WAIT can follow this store's scripts on their
// connection: a node client of go-redis gives that connection, and the
// read timeout must outlast WAIT.
func (s *redisStore) canWait(w replicaWait) error {
	if !w.on() {
		return nil
	}
	var read time.Duration
	switch c := s.rdb.(type) {
	case *redis.Client:
		read = c.Options().ReadTimeout
	case *redis.ClusterClient:
		read = c.Options().ReadTimeout
	case *redis.Ring:
		read = c.Options().ReadTimeout
	default:
		return argError("WaitReplicas", w.n, fmt.Sprintf("needs a *redis.Client, *redis.ClusterClient or *redis.Ring (WAIT must follow the script on its connection), not %T", s.rdb))
	}
	if read > 0 && w.timeout >= read {
		return argError("WaitReplicas", w.timeout, "timeout must be below the go-redis ReadTimeout "+read.String()+", which bounds the wait for WAIT's reply")
	}
	return nil
}

// canWait rejects WaitReplicas: a quorum's nodes are independent masters,
// and a failover of one is what the quorum is for.
func (q *quorumStore) canWait(w replicaWait) error {
	if w.on() {
		return argError("WaitReplicas", w.n, "is not for a Redlock Client: its nodes have no replicas to wait for, and the quorum is what survives losing one")
	}
	return nil
}

// nodeFor returns the client of the node whose master serves key. Its
// pipelines run on one connection; a ClusterClient's or Ring's would
// send WAIT, which has no key, wherever its first command goes, and
// after a MOVED redirect the script alone.
func (s *redisStore) nodeFor(ctx context.Context, key string) (*redis.Client, error) {
	switch c := s.rdb.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case *redis.Ring:
		return c.GetShardClientForKey(key)
	}
	return nil, fmt.Errorf("WaitReplicas: unsupported client %T", s.rdb)
}

// replicated sends the script calls of send, then WAIT when w asks for
// it, in one pipeline on node: WAIT counts the replicas that have
// everything its own connection wrote, so it must follow the scripts on
// their connection. The scripts go the store's first way and, when the
// node lacked what it needs, the next (send.go; a promoted replica starts
// with an empty script cache, and the first WAIT is then spent for
// nothing). The calls of one pipeline run one library or script, so they
// all lack it or none does. It returns WAIT's answer, or its failure; a
// script's own reply and error are in its command.
func (s *redisStore) replicated(ctx context.Context, node *redis.Client, w replicaWait, send func(p redis.Pipeliner, way sendWay)) (acked int, err error) {
	for way := s.firstWay(); ; {
		loads := s.loads.Load()
		var wait *redis.Cmd
		cmds, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			send(p, way)
			if w.on() {
				// At least 1 ms: WAIT n 0 would block for good.
				wait = p.Do(ctx, "WAIT", w.n, max(w.timeout.Milliseconds(), 1))
			}
			return nil
		})
		if err != nil && !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Err() != nil }) {
			// go-redis reports a failed dial only here, leaving the
			// commands without a reply or an error.
			for _, c := range cmds {
				c.SetErr(err)
			}
		}
		// Only the scripts' errors say how to send them: WAIT's own refusal
		// (an ACL without it) would read as FCALL's, and the scripts,
		// which ran, would be sent again.
		scripts := cmds
		if wait != nil {
			scripts = cmds[:len(cmds)-1]
		}
		if i := slices.IndexFunc(scripts, func(c redis.Cmder) bool { return lacks(way, c.Err()) }); i >= 0 {
			way, _ = s.nextWay(ctx, way, scripts[i].Err(), loads)
			continue
		}
		if cc, ok := s.rdb.(*redis.ClusterClient); ok && slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return isMoved(c.Err()) }) {
			cc.ReloadState(ctx) // the next call goes to the slot's new master
		}
		if wait == nil {
			return 0, nil
		}
		n, err := wait.Int64()
		return int(n), err
	}
}

func isMoved(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK"))
}

// script queues one call of sc with args on p, on the keys of k, sent way.
func script(ctx context.Context, p redis.Pipeliner, sc luaScript, way sendWay, k keyspace, args ...any) *redis.Cmd {
	cmd := scriptCmd(ctx, sc, way, append(evalArgs(sc, k, len(args)), args...))
	_ = p.Process(ctx, cmd)
	return cmd
}

// evalWaited runs sc once on the node of k, followed by WAIT (see
// replicated).
func (s *redisStore) evalWaited(ctx context.Context, k keyspace, w replicaWait, sc luaScript, args ...any) (cmd *redis.Cmd, acked int, waitErr error) {
	node, err := s.nodeFor(ctx, k.id())
	if err != nil {
		cmd = redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd, 0, nil
	}
	acked, waitErr = s.replicated(ctx, node, w, func(p redis.Pipeliner, way sendWay) {
		cmd = script(ctx, p, sc, way, k, args...)
	})
	return cmd, acked, waitErr
}

// refreshWaited sends the calls whose batches ask for replicas: per node
// one pipeline that ends in WAIT, for the strictest of its batches, the
// nodes at once.
func (s *redisStore) refreshWaited(ctx context.Context, batches []refreshBatch, calls []*refreshCall) {
	byNode := map[*redis.Client][]*refreshCall{}
	for _, c := range calls {
		node, err := s.nodeFor(ctx, batches[c.batch].keys.id())
		if err != nil {
			c.cmd = redis.NewCmd(ctx)
			c.cmd.SetErr(err)
			continue
		}
		byNode[node] = append(byNode[node], c)
	}
	var sends []func()
	for node, cs := range byNode {
		var w replicaWait
		for _, c := range cs {
			w = w.stricter(batches[c.batch].replicas)
		}
		sends = append(sends, func() {
			acked, err := s.replicated(ctx, node, w, func(p redis.Pipeliner, way sendWay) {
				for _, c := range cs {
					c.cmd = script(ctx, p, refreshScript, way, batches[c.batch].keys, c.args...)
				}
			})
			for _, c := range cs {
				c.acked, c.waitErr = acked, err
			}
		})
	}
	runAll(sends...)
}

// runAll runs fns at once (the last on the caller's goroutine) and
// returns when all did.
func runAll(fns ...func()) {
	var wg sync.WaitGroup
	for i, fn := range fns {
		if i == len(fns)-1 {
			fn()
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn()
		}()
	}
	wg.Wait()
}
