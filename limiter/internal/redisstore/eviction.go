package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter/internal/store"
)

// Evicting returns a description of the nodes that may evict keys ("" for
// none), asking only the nodes not in checked, and adds to checked those
// that answered without.
func (s *Store) Evicting(ctx context.Context, checked *store.NodeSet) (string, error) {
	var mu sync.Mutex
	var found []string
	err := s.dep.masters(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		node := deploymentOf(c).addr
		if checked.Has(node) {
			return nil
		}
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		if what := evictionIn(info); what != "" {
			mu.Lock()
			found = append(found, what)
			mu.Unlock()
		} else {
			checked.Add(node)
		}
		return nil
	})
	return strings.Join(found, "; "), err
}

// evictionIn reads INFO memory: keys can be evicted only with a maxmemory
// set and a policy other than noeviction.
func evictionIn(info string) string {
	var maxmemory int64
	policy := ""
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "maxmemory":
			maxmemory, _ = strconv.ParseInt(v, 10, 64)
		case "maxmemory_policy":
			policy = v
		}
	}
	if maxmemory == 0 || policy == "" || policy == "noeviction" {
		return ""
	}
	return fmt.Sprintf("maxmemory %d, maxmemory-policy %s", maxmemory, policy)
}
