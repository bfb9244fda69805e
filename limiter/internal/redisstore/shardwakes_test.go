package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter/internal/redisstore"
	"github.com/redsem/redsem/limiter/internal/store"
)

// A channel stays subscribed, on the master of its slot, while it is
// wanted and a while after; then it is unsubscribed, so names waited on
// once leave nothing behind. Its messages arrive while it is.
func TestShardChannelsLingerThenGo(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) }) // last: after the Cluster stops
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got sync.Map
	w, stop := shardWakes(ctx, cc, func(m string) { got.Store(m, true) })
	defer stop()
	redisstore.SetLinger(w, 200*time.Millisecond)

	var chans []string
	for i := range 6 {
		chans = append(chans, store.NewKeyspace("redsem:", fmt.Sprint("linger-", i), 1).WakeChannel("me"))
	}
	for _, ch := range chans {
		if err := w.Add(ctx, ch); err != nil {
			t.Fatal(err)
		}
		if n := subscribers(t, ctx, cc, ch); n != 1 {
			t.Fatalf("%s: %d subscribers after Add, want 1", ch, n)
		}
		if err := cc.SPublish(ctx, ch, ch).Err(); err != nil {
			t.Fatal(err)
		}
	}
	redistest.Eventually(t, 5*time.Second, "every message arrived", func() bool {
		for _, ch := range chans {
			if _, ok := got.Load(ch); !ok {
				return false
			}
		}
		return true
	})
	if conns := clientsOf(t, ctx, cc); conns > 3 {
		t.Fatalf("%d pub/sub connections for %d channels on 3 masters, want one per master", conns, len(chans))
	}
	for _, ch := range chans {
		w.Drop(ch)
	}
	if n := subscribers(t, ctx, cc, chans[0]); n != 1 {
		t.Fatalf("%d subscribers just after the last Drop, want 1 (it lingers)", n)
	}
	time.Sleep(300 * time.Millisecond)
	if err := w.Add(ctx, chans[0]); err != nil { // the next Drop sweeps
		t.Fatal(err)
	}
	w.Drop(chans[0])
	for _, ch := range chans[1:] {
		redistest.Eventually(t, 5*time.Second, ch+" unsubscribed", func() bool { return subscribers(t, ctx, cc, ch) == 0 })
	}
	if n := subscribers(t, ctx, cc, chans[0]); n != 1 {
		t.Fatalf("%d subscribers of the channel added again, want 1", n)
	}
}

// shardWakes returns the Cluster's ShardWakes and what stops it and waits
// for its goroutines.
func shardWakes(ctx context.Context, cc *redis.ClusterClient, deliver func(string)) (store.ShardWakes, func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	spawn := func(fn func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn()
		}()
	}
	w := redisstore.New(cc, true).ShardWakes(ctx, spawn, deliver, func() {})
	return w, func() { cancel(); wg.Wait() }
}

// subscribers is PUBSUB SHARDNUMSUB of ch on the master of its slot.
func subscribers(t testing.TB, ctx context.Context, cc *redis.ClusterClient, ch string) int64 {
	t.Helper()
	m, err := cc.MasterForKey(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	n, err := m.PubSubShardNumSub(ctx, ch).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n[ch]
}

// clientsOf counts the pub/sub connections on every master.
func clientsOf(t testing.TB, ctx context.Context, cc *redis.ClusterClient) int {
	t.Helper()
	var mu sync.Mutex
	n := 0
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		list, err := c.ClientList(ctx).Result()
		mu.Lock()
		defer mu.Unlock()
		n += strings.Count(list, " flags=P ")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
