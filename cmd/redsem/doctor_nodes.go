package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// deployment is what doctor checks: one server, the masters of a Cluster,
// or the independent nodes of a Redlock quorum.
type deployment struct {
	kind   string // "server", "cluster" or "redlock"
	nodes  []*node
	down   []finding // Redlock nodes that did not answer
	closer func()
}

func (d *deployment) close() { d.closer() }

// node is one Redis server, with its INFO read once for every check.
type node struct {
	addr    string
	rdb     *redis.Client
	info    map[string]string
	infoErr error // INFO refused (an ACL) or failed

	// offset is set by checkClock, for checkSkewBetween.
	offset    offset
	offsetErr error
}

// connectNodes connects as the connection flags say. An unreachable server
// or Cluster is an error, as for the other commands; an unreachable
// Redlock node is a finding, since a quorum is meant to outlive one.
func connectNodes(ctx context.Context, o options, getenv func(string) string) (*deployment, error) {
	if o.doctor.redlock != "" {
		return connectRedlock(ctx, o, getenv)
	}
	rdb, where, err := o.conn.client(getenv)
	if err != nil {
		return nil, err
	}
	if err := answers(ctx, rdb); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("cannot connect to Redis at %s: %w", where, err)
	}
	d := &deployment{kind: "server", closer: func() { rdb.Close() }}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		d.kind = "cluster"
		err = c.ForEachMaster(ctx, d.addLocked(new(sync.Mutex)))
	case *redis.Client:
		d.nodes = []*node{newNode(ctx, c)}
	}
	if err != nil {
		d.close()
		return nil, fmt.Errorf("listing the Cluster's masters: %w", err)
	}
	return d, nil
}

// addLocked adds the masters ForEachMaster visits, in parallel.
func (d *deployment) addLocked(mu *sync.Mutex) func(context.Context, *redis.Client) error {
	return func(ctx context.Context, c *redis.Client) error {
		n := newNode(ctx, c)
		mu.Lock()
		defer mu.Unlock()
		d.nodes = append(d.nodes, n)
		return nil
	}
}

// connectRedlock connects to each -redlock address with the other
// connection flags (user, password, TLS).
func connectRedlock(ctx context.Context, o options, getenv func(string) string) (*deployment, error) {
	d := &deployment{kind: "redlock"}
	var clients []*redis.Client
	d.closer = func() {
		for _, c := range clients {
			c.Close()
		}
	}
	for _, addr := range splitAddrs(o.doctor.redlock) {
		conn := o.conn
		conn.addr, conn.addrSet = addr, true
		rdb, _, err := conn.client(getenv)
		if err != nil {
			d.close()
			return nil, err
		}
		c := rdb.(*redis.Client)
		clients = append(clients, c)
		if err := answers(ctx, c); err != nil {
			d.down = append(d.down, finding{Node: addr, Check: "connect", Status: statusError,
				Found:  fmt.Sprintf("does not answer: %v", err),
				Advice: "the quorum works without it only while every other node is up; bring it back"})
			continue
		}
		d.nodes = append(d.nodes, newNode(ctx, c))
	}
	return d, nil
}

// answers pings the server; an ACL refusal of PING is an answer (the
// acl check reports it).
func answers(ctx context.Context, rdb redis.UniversalClient) error {
	if err := rdb.Ping(ctx).Err(); err != nil && !isNoPerm(err) {
		return err
	}
	return nil
}

// splitAddrs reads a comma-separated address list.
func splitAddrs(s string) []string {
	var addrs []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// newNode reads the node's INFO (the default sections: server, memory,
// persistence, replication, cluster).
func newNode(ctx context.Context, c *redis.Client) *node {
	n := &node{addr: c.Options().Addr, rdb: c}
	text, err := c.Info(ctx).Result()
	if err != nil {
		n.infoErr = err
		return n
	}
	n.info = parseInfo(text)
	return n
}

// parseInfo reads INFO's "field:value" lines.
func parseInfo(text string) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}
