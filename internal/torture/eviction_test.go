package torture

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// With an evicting maxmemory-policy, the Client (by default) refuses to
// grant at all: an evicted key would forget its holders. (One Client in
// this process shows it; the refusal does not depend on load.)
func evictionRefused(t *testing.T, sz size) {
	start := time.Now()
	srv := redistest.StartServer(t, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru")
	sem, err := redistest.Limiter(t, srv.Client(t)).Semaphore("torture-eviction-refused", 5)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := sem.Acquire(ctx)
	if !errors.Is(err, limiter.ErrEvictingRedis) {
		t.Errorf("Acquire on a volatile-lru Redis: %v, want ErrEvictingRedis", err)
		if l != nil {
			_ = l.Release(ctx)
		}
	}
	addRow(row{scenario: "eviction-refused", procs: 1, goroutines: 1, notes: []string{"volatile-lru: Acquire refused with ErrEvictingRedis"}, took: time.Since(start)})
}

// Memory full under noeviction: Redis refuses the scripts whose first
// write would take memory (Redis lets a script that already wrote go
// on, for atomicity, so some grants and refreshes still pass), and
// holders whose refreshes fail lose their leases; but Redis forgets
// nothing, so nobody is granted what others hold.
func evictionNoEviction(t *testing.T, sz size) {
	srv := redistest.StartServer(t, "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	addRow(runScenario(t, sz, weighted("eviction-noeviction", sz, single(srv), func(t *testing.T, r *run) {
		squeeze := memorySqueeze(t, srv)
		d := longestTTL + 500*time.Millisecond
		faults(sz, func(int) { squeeze(d) })
		r.note("out of memory %dx%v", sz.repeats, d)
	})))
}

// What refusing an evicting Redis guards against: volatile-lru with
// AllowEviction. Only the
// semaphore's keys carry TTLs, so they are what Redis evicts; a short
// squeeze evicts them, then Redis grants again at once while the holders
// it forgot learn of it only at their next refresh. Reported, never
// failed on: it is the danger, shown. Long version only.
func evictionUnguarded(t *testing.T, sz size) {
	if !*long {
		t.Skip("long version only (make torture)")
	}
	srv := redistest.StartServer(t, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru")
	s := weighted("eviction-unguarded", sz, single(srv), func(t *testing.T, r *run) {
		squeeze := memorySqueeze(t, srv)
		d := 300 * time.Millisecond
		faults(sz, func(int) { squeeze(d) })
		r.note("out of memory %dx%v", sz.repeats, d)
	})
	s.unsafe = true
	s.options = []string{"allow-eviction"}
	addRow(runScenario(t, sz, s))
}

// memorySqueeze returns a function that puts srv out of memory for d:
// it writes 1MB of keys without a TTL (other data, which volatile-*
// policies cannot evict), then sets maxmemory half a megabyte below what
// Redis uses, so that it stays out of memory whatever the workers free
// meanwhile (filling up to the limit would leave it hovering there, in
// and out). Then it gives the memory back.
func memorySqueeze(t *testing.T, srv *redistest.Server) func(d time.Duration) {
	rdb := srv.Client(t)
	ctx := context.Background()
	value := strings.Repeat("x", 32<<10)
	return func(d time.Duration) {
		saved, err := rdb.ConfigGet(ctx, "maxmemory").Result()
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for i := range 32 {
			keys = append(keys, fmt.Sprintf("filler:%d", i))
			if err := rdb.Set(ctx, keys[i], value, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		info, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		total := infoInt(t, info, "used_memory")
		if err := rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(total-512<<10)).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(d)
		if err := rdb.ConfigSet(ctx, "maxmemory", saved["maxmemory"]).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Del(ctx, keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func infoInt(t *testing.T, info, field string) int64 {
	t.Helper()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO %s: %v", field, err)
			}
			return n
		}
	}
	t.Fatalf("INFO has no %s", field)
	return 0
}
