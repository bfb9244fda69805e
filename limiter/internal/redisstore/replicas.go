package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter/internal/store"
)

// CanWait says whether WAIT can follow this store's scripts on their
// connection: a node client of go-redis gives that connection, and the
// read timeout must outlast WAIT.
func (s *Store) CanWait(w store.ReplicaWait) error {
	switch {
	case !w.On():
		return nil
	case s.dep.nodeFor == nil:
		return fmt.Errorf("needs a *redis.Client, *redis.ClusterClient or *redis.Ring (WAIT must follow the script on its connection), not %T", s.rdb)
	case s.dep.readTimeout > 0 && w.Timeout >= s.dep.readTimeout:
		return fmt.Errorf("timeout must be below the go-redis ReadTimeout %v, which bounds the wait for WAIT's reply", s.dep.readTimeout)
	}
	return nil
}

// replicated sends the script calls of send, then WAIT when w asks for
// it, in one pipeline on node: WAIT counts the replicas that have
// everything its own connection wrote, so it must follow the scripts on
// their connection. The scripts go the store's first way and, when the
// node lacked what it needs, the next (send.go; a promoted replica starts
// with an empty script cache, and the first WAIT is then spent for
// nothing). The calls of one pipeline all run sc, so they all lack it or
// none does. It returns WAIT's answer, or its failure; a
// script's own reply and error are in its command.
func (s *Store) replicated(ctx context.Context, node *redis.Client, w store.ReplicaWait, sc luaScript, send func(p redis.Pipeliner, way sendWay)) (acked int, err error) {
	addr := ""
	if s.dep.reload != nil {
		addr = node.Options().Addr
	}
	for way := s.firstWay(sc); ; {
		loads := s.loads.Load()
		if err := s.admit(addr); err != nil {
			return 0, refuse(ctx, node, way, send, err)
		}
		var wait *redis.Cmd
		cmds, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			send(p, way)
			if w.On() {
				// At least 1 ms: WAIT n 0 would block for good.
				wait = p.Do(ctx, "WAIT", w.N, max(w.Timeout.Milliseconds(), 1))
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
		s.observe(ctx, addr, cmds[0].Err())
		if s.dep.reload != nil && slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return isMoved(c.Err()) }) {
			s.dep.reload(ctx) // the next call goes to the slot's new master
		}
		if wait == nil {
			return 0, nil
		}
		n, err := wait.Int64()
		if err == nil && int(n) < w.N {
			err = fewReplicas(ctx, node, w.N)
		}
		return int(n), err
	}
}

// fewReplicas returns a *store.FewReplicas when node, whose WAIT fell
// short, has fewer than n connected replicas, else nil: asked only then,
// so the replicas' count costs nothing while they keep up.
func fewReplicas(ctx context.Context, node *redis.Client, n int) error {
	info, err := node.Info(ctx, "replication").Result()
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			if c, err := strconv.Atoi(v); err == nil && c < n {
				return &store.FewReplicas{Addr: node.Options().Addr, Connected: c}
			}
		}
	}
	return nil
}

// refuse fails the calls send would queue with err, sending nothing: their
// node did not answer lately (unreachable.go). It returns err, as WAIT's
// failure.
func refuse(ctx context.Context, node *redis.Client, way sendWay, send func(p redis.Pipeliner, way sendWay), err error) error {
	r := &recorder{Pipeliner: node.Pipeline()}
	send(r, way)
	for _, c := range r.cmds {
		c.SetErr(err)
	}
	return err
}

// recorder keeps the commands queued on it, for refuse: a pipeline that is
// never sent.
type recorder struct {
	redis.Pipeliner
	cmds []redis.Cmder
}

func (r *recorder) Process(ctx context.Context, cmd redis.Cmder) error {
	r.cmds = append(r.cmds, cmd)
	return nil
}

func isMoved(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK"))
}

// script queues one call of sc with args on p, on the keys of k, sent way.
func script(ctx context.Context, p redis.Pipeliner, sc luaScript, way sendWay, k store.Keyspace, args ...any) *redis.Cmd {
	cmd := scriptCmd(ctx, sc, way, append(evalArgs(sc, k, len(args)), args...))
	_ = p.Process(ctx, cmd)
	return cmd
}

// evalWaited runs sc once on the node of k, followed by WAIT (see
// replicated).
func (s *Store) evalWaited(ctx context.Context, k store.Keyspace, w store.ReplicaWait, sc luaScript, args ...any) (cmd *redis.Cmd, acked int, waitErr error) {
	node, err := s.dep.nodeFor(ctx, k.ID())
	if err != nil {
		cmd = redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd, 0, nil
	}
	acked, waitErr = s.replicated(ctx, node, w, sc, func(p redis.Pipeliner, way sendWay) {
		cmd = script(ctx, p, sc, way, k, args...)
	})
	return cmd, acked, waitErr
}

// refreshWaited sends the calls whose batches ask for replicas: per node
// one pipeline that ends in WAIT, for the strictest of its batches, the
// nodes at once.
func (s *Store) refreshWaited(ctx context.Context, batches []store.RefreshBatch, calls []*refreshCall) {
	byNode := map[*redis.Client][]*refreshCall{}
	for _, c := range calls {
		node, err := s.dep.nodeFor(ctx, batches[c.batch].Keys.ID())
		if err != nil {
			c.cmd = redis.NewCmd(ctx)
			c.cmd.SetErr(err)
			continue
		}
		byNode[node] = append(byNode[node], c)
	}
	var sends []func()
	for node, cs := range byNode {
		var w store.ReplicaWait
		for _, c := range cs {
			w = w.Stricter(batches[c.batch].Replicas)
		}
		sends = append(sends, func() {
			acked, err := s.replicated(ctx, node, w, refreshScript, func(p redis.Pipeliner, way sendWay) {
				for _, c := range cs {
					c.cmd = script(ctx, p, refreshScript, way, batches[c.batch].Keys, c.args...)
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
