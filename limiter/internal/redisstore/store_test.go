package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter/internal/redisstore"
	"github.com/redsem/redsem/limiter/internal/store"
)

// The tests here call a Store as limiter does, against a real server:
// each script's behaviour is pinned in the layer that holds it.

func TestMain(m *testing.M) { redistest.Main(m, nil) }

const prefix = "redsem:"

// owner is the Client the tests' requests come from, and channel its
// plain wake channel (limiter's: prefix + "wake:" + id).
const (
	owner   = "owner-a"
	channel = prefix + "wake:" + owner
)

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newStore is a single deployment's Store (queue served in order).
func newStore(rdb redis.UniversalClient) *redisstore.Store { return redisstore.New(rdb, true) }

func keyspace(name string, limit int64) store.Keyspace { return store.NewKeyspace(prefix, name, limit) }

// request is a weight-1 acquire of id on k by owner, a minute's TTL,
// queueing as wait ("" = never).
func request(k store.Keyspace, id, wait string) store.AcquireRequest {
	return store.AcquireRequest{Limit: k.Limit, Weight: 1, TTL: time.Minute, ID: id, Owner: owner, Wait: wait, Channel: channel}
}

// mustAcquire runs one acquire and fails the test on an error or on a
// grant other than want.
func mustAcquire(t testing.TB, ctx context.Context, s store.Store, k store.Keyspace, r store.AcquireRequest, want bool) store.AcquireReply {
	t.Helper()
	rep, err := s.Acquire(ctx, k, r)
	if err != nil {
		t.Fatalf("acquire %s (wait %q): %v", r.ID, r.Wait, err)
	}
	if rep.Granted != want {
		t.Fatalf("acquire %s (wait %q): granted %v, want %v: %+v", r.ID, r.Wait, rep.Granted, want, rep)
	}
	return rep
}

// mustRelease releases id's lease of token and fails unless it freed it.
func mustRelease(t testing.TB, ctx context.Context, s store.Store, k store.Keyspace, id, token string) {
	t.Helper()
	rep, err := s.Release(ctx, k, store.ReleaseRequest{ID: id, Token: token, Channel: channel, Wake: true})
	if err != nil || rep.Freed == 0 {
		t.Fatalf("release %s (token %s): freed %d, %v", id, token, rep.Freed, err)
	}
}

// cycle takes and gives back id's lease on k.
func cycle(t testing.TB, ctx context.Context, s *redisstore.Store, k store.Keyspace, id string) {
	t.Helper()
	rep := mustAcquire(t, ctx, s, k, request(k, id, ""), true)
	mustRelease(t, ctx, s, k, id, rep.Token)
}
