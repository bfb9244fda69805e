package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

// aclSetUser is the least-privilege user of the README (Redis 6.2+), run
// here verbatim. resetchannels must come before &redsem:*, since the rules
// apply left to right; Redis 6.2 grants every channel by default.
//
// The commands, and who sends them:
//   - fcall, function|load: acquire, release and resume run as functions
//     of a library loaded when the server lacks it (Redis 7+; without
//     these a Client falls back to EVALSHA: TestACLWithoutFunctions).
//   - evalsha, eval: every other operation is a script, sent by EVALSHA,
//     with EVAL when the server's script cache lacks it (new, restarted,
//     failed over).
//   - hget: Inspector.Limit reads the fleet limit directly.
//   - info: the eviction check (INFO memory) before a Client's first
//     acquisition; refused, it is silently skipped.
//   - scan: Inspector.Names.
//   - subscribe: the wake-up channel of a Client that waits.
//   - ping: the keep-alive of that subscription after 15s of silence.
//   - the rest run inside the scripts, where ACLs apply as well:
//     time (the only clock), hmget/hset/hdel/hincrby (the state hash),
//     zadd/zrem/zscore/zmscore/zrange/zrangebyscore/zrevrangebyscore (the
//     leases and the queue), pexpireat/persist (key expiry), publish
//     (waking another Client's waiters), get/set/del/mget (a name's
//     pause and rate).
const aclSetUser = "ACL SETUSER redsem on >password ~redsem:* resetchannels &redsem:* -@all" +
	" +fcall +function|load +evalsha +eval +hget +info +scan +subscribe +ping" +
	" +time +hmget +hset +hdel +hincrby" +
	" +zadd +zrem +zscore +zmscore +zrange +zrangebyscore +zrevrangebyscore" +
	" +pexpireat +persist +publish +get +set +del +mget"

// pubsubKeepAlive is how long the wake-up connection stays silent before
// the Client pings it (receive in internal/redisstore/pubsub.go); only a wait longer than
// that sends PING.
const pubsubKeepAlive = 15 * time.Second

// TestACL runs the core of the library as a user that has only what
// aclSetUser grants, and proves that every command granted is used and
// that nothing it sent was refused, including refusals the library
// tolerates without an error (INFO, the pub/sub ping, SUBSCRIBE, which
// falls back to polling).
func TestACL(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	admin := srv.Client(t)
	if err := admin.Do(ctx, aclArgs(aclSetUser)...).Err(); err != nil {
		t.Fatalf("%s: %v", aclSetUser, err)
	}
	asUser := func() *redis.Client {
		return srv.Client(t, func(o *redis.Options) {
			o.Username, o.Password = "redsem", "password"
			o.ContextTimeoutEnabled = true // as the README recommends
		})
	}
	rdbA, rdbB := asUser(), asUser()

	// The ACL must be in force, or the rest proves nothing: a key outside
	// the prefix, a command not granted, a channel outside the prefix.
	for what, err := range map[string]error{
		"HGET other:x":       rdbA.HGet(ctx, "other:x", "f").Err(),
		"GET other:x":        rdbA.Get(ctx, "other:x").Err(),
		"LPUSH redsem:x":     rdbA.LPush(ctx, "redsem:x", "v").Err(),
		"PUBLISH other:wake": rdbA.Publish(ctx, "other:wake", "x").Err(),
	} {
		if !redis.HasErrorPrefix(err, "NOPERM") {
			t.Errorf("%s as the restricted user: want NOPERM, got %v", what, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// From here on, any entry in the ACL log is a refusal of the library.
	if err := admin.Do(ctx, "ACL", "LOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	srv.ResetStats(t)

	logs := &aclLogs{}
	a := aclClient(t, rdbA, logs)
	b := aclClient(t, rdbB, logs)
	semA, err := a.Semaphore("acl", 1)
	if err != nil {
		t.Fatal(err)
	}
	// The waiter below outlasts pubsubKeepAlive.
	semB, err := b.Semaphore("acl", 1, limiter.AcquireTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}

	l1, err := semA.TryAcquire(ctx)
	if err != nil {
		t.Fatal("TryAcquire:", err)
	}
	if err := l1.Refresh(ctx); err != nil {
		t.Fatal("Refresh:", err)
	}
	// A full semaphore takes other paths of the script (sweep, earliest).
	if _, err := semA.TryAcquire(ctx); !errors.Is(err, limiter.ErrBusy) {
		t.Fatalf("TryAcquire on a full semaphore: want ErrBusy, got %v", err)
	}
	ins := inspect.New(a)
	hs, err := ins.Holders(ctx, "acl")
	if err != nil {
		t.Fatal("Holders:", err)
	}
	if len(hs) != 1 || hs[0].ID != l1.ID() || hs[0].Token != l1.Token() {
		t.Fatalf("Holders: %+v, want only %s", hs, l1.ID())
	}

	if err := ins.SetLimit(ctx, "acl", 2); err != nil {
		t.Fatal("SetLimit:", err)
	}
	if n, err := ins.Limit(ctx, "acl"); err != nil || n != 2 {
		t.Fatalf("Limit after SetLimit(2) = %d, %v", n, err)
	}
	handed, err := semA.Acquire(ctx)
	if err != nil {
		t.Fatal("Acquire:", err)
	}
	handed.StopRefresh()
	resumed, err := semB.Resume(ctx, handed.Ticket())
	if err != nil {
		t.Fatal("Resume:", err)
	}
	if resumed.Token() <= handed.Token() {
		t.Fatalf("Resume: token %d, not above %d", resumed.Token(), handed.Token())
	}
	if err := resumed.Release(ctx); err != nil {
		t.Fatal("Release of the resumed lease:", err)
	}
	if err := ins.SetLimit(ctx, "acl", 0); err != nil {
		t.Fatal("SetLimit(0):", err)
	}
	if n, err := ins.Limit(ctx, "acl"); err != nil || n != 0 {
		t.Fatalf("Limit after SetLimit(0) = %d, %v", n, err)
	}
	names, err := ins.Names(ctx, "")
	if err != nil {
		t.Fatal("Names:", err)
	}
	if !slices.Equal(names, []string{"acl"}) {
		t.Fatalf("Names = %q, want [acl]", names)
	}
	aclRatesAndPauses(ctx, t, a)
	aclExpiry(ctx, t, a)

	type acquired struct {
		l   *limiter.Lease
		err error
	}
	waited := make(chan acquired, 1)
	go func() {
		l, err := semB.Acquire(ctx)
		waited <- acquired{l, err}
	}()
	redistest.Eventually(t, 10*time.Second, "B's waiter queued", func() bool {
		select {
		case w := <-waited:
			t.Fatalf("the waiter returned before any release: %v", w.err)
		default:
		}
		ws, err := ins.Waiters(ctx, "acl")
		if err != nil {
			t.Error("Waiters:", err)
			return true
		}
		return len(ws) == 1
	})
	if t.Failed() {
		t.FailNow()
	}
	queued := time.Now()
	// INFO is read once per Client, before its first attempt; polling the
	// stats below sends INFO too, so count it now.
	if n := srv.CommandCalls(t)["info"]; n < 2 {
		t.Errorf("INFO ran %d times, want one per Client", n)
	}

	// Only a wait past the keep-alive sends the pub/sub PING.
	time.Sleep(time.Until(queued.Add(pubsubKeepAlive)))
	redistest.Eventually(t, 10*time.Second, "the wake-up connection pinged", func() bool {
		return srv.CommandCalls(t)["ping"] > 0
	})
	select {
	case w := <-waited:
		t.Fatalf("the waiter returned before any release: %v", w.err)
	default:
	}

	// The release publishes on B's channel.
	if err := l1.Release(ctx); err != nil {
		t.Fatal("Release:", err)
	}
	w := <-waited
	if w.err != nil {
		t.Fatal("Acquire of the waiter:", w.err)
	}
	if w.l.Token() <= resumed.Token() {
		t.Fatalf("waiter's token %d, not above %d", w.l.Token(), resumed.Token())
	}

	// Close releases the waiter's lease.
	for _, c := range []*limiter.Client{a, b} {
		if err := c.Close(ctx); err != nil {
			t.Fatal("Close:", err)
		}
	}

	// The restart quarantine asks the server's age (INFO server) inside
	// the acquire script, for a name the server has no token for; refused
	// there, it would be silently off.
	q, err := limiter.New(rdbA, limiter.Logger(slog.New(logs)), limiter.RestartQuarantine(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	qmu, _ := q.Mutex("acl-quarantine", limiter.AcquireTimeout(10*time.Second))
	if l, err := qmu.Acquire(ctx); err != nil {
		t.Fatal("Acquire under the restart quarantine:", err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal("Release:", err)
	}
	if err := q.Close(ctx); err != nil {
		t.Fatal("Close:", err)
	}

	calls := srv.CommandCalls(t)
	for _, cmd := range aclCommands(aclSetUser) {
		if calls[cmd] == 0 {
			t.Errorf("%s is granted but was never run: the test misses a path, or the ACL grants too much", cmd)
		}
	}
	if refused := aclRefusals(t, ctx, admin); len(refused) > 0 {
		t.Errorf("the server refused the library:\n%s", strings.Join(refused, "\n"))
	}
	for _, rec := range logs.all() {
		t.Errorf("logged: %s", rec)
	}
}

// A user without FCALL or FUNCTION LOAD (a Redis 6.2 line, or an
// operator's choice) still runs everything: each Client is refused once
// and sends EVALSHA from then on.
func TestACLWithoutFunctions(t *testing.T) {
	for _, drop := range []string{" +fcall", " +function|load"} {
		t.Run(strings.TrimPrefix(drop, " +"), func(t *testing.T) {
			srv := redistest.StartServer(t)
			ctx := ctxT(t, 30*time.Second)
			admin := srv.Client(t)
			if err := admin.Do(ctx, aclArgs(strings.Replace(aclSetUser, drop, "", 1))...).Err(); err != nil {
				t.Fatal(err)
			}
			rdb := srv.Client(t, func(o *redis.Options) { o.Username, o.Password = "redsem", "password" })
			if err := admin.Do(ctx, "ACL", "LOG", "RESET").Err(); err != nil {
				t.Fatal(err)
			}
			mu, err := redistest.Limiter(t, rdb).Mutex("nofunctions")
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				l, err := mu.TryAcquire(ctx)
				if err != nil {
					t.Fatal("TryAcquire:", err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal("Release:", err)
				}
			}
			calls := srv.CommandCalls(t)
			// FCALL counts once when the server, not the ACL, refused it
			// (its function was not loaded), never after.
			if calls["evalsha"]+calls["eval"] < 6 || calls["fcall"] > 1 {
				t.Fatalf("3 cycles: %v; want them by EVALSHA", calls)
			}
			if refused := aclRefusals(t, ctx, admin); len(refused) != 1 {
				t.Fatalf("refusals %q; want one, the first FCALL or FUNCTION LOAD", refused)
			}
		})
	}
}

// aclArgs splits an ACL SETUSER line into the arguments of one command.
func aclArgs(line string) []any {
	var args []any
	for _, f := range strings.Fields(line) {
		args = append(args, f)
	}
	return args
}

// aclCommands lists the commands an ACL SETUSER line grants.
func aclCommands(line string) []string {
	var cmds []string
	for _, f := range strings.Fields(line) {
		if cmd, ok := strings.CutPrefix(f, "+"); ok {
			cmds = append(cmds, strings.ToLower(cmd))
		}
	}
	return cmds
}

// aclClient is a limiter Client closed at cleanup in case the test stops
// early; the test closes it itself to check Close's own commands.
func aclClient(t *testing.T, rdb redis.UniversalClient, logs *aclLogs) *limiter.Client {
	t.Helper()
	c, err := limiter.New(rdb, limiter.Logger(slog.New(logs)), limiter.RestartQuarantine(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// aclRefusals returns the entries of the ACL log, but for CLIENT SETINFO:
// go-redis sends it on every new connection and ignores its failure
// (Redis 7.2 on; older servers do not know it), and the library does not
// need it.
func aclRefusals(t *testing.T, ctx context.Context, admin *redis.Client) []string {
	t.Helper()
	entries, err := admin.Do(ctx, "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal("ACL LOG:", err)
	}
	var out []string
	for _, e := range entries {
		f := aclEntry(e)
		if f["object"] == "client|setinfo" {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s (%s, in %s)", f["reason"], f["object"], f["username"], f["context"]))
	}
	return out
}

// aclEntry reads one ACL LOG entry, a map in RESP3 and a flat list of
// pairs in RESP2.
func aclEntry(e any) map[string]string {
	f := map[string]string{}
	switch v := e.(type) {
	case map[any]any:
		for k, x := range v {
			f[fmt.Sprint(k)] = fmt.Sprint(x)
		}
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			f[fmt.Sprint(v[i])] = fmt.Sprint(v[i+1])
		}
	}
	return f
}

// aclLogs records what the library logs: every message it has is about
// something going wrong (a refused INFO is logged only at Debug).
type aclLogs struct {
	mu   sync.Mutex
	recs []string
}

func (h *aclLogs) Enabled(context.Context, slog.Level) bool { return true }

func (h *aclLogs) Handle(_ context.Context, r slog.Record) error {
	s := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		s += " " + a.String()
		return true
	})
	h.mu.Lock()
	h.recs = append(h.recs, s)
	h.mu.Unlock()
	return nil
}

func (h *aclLogs) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *aclLogs) WithGroup(string) slog.Handler      { return h }

func (h *aclLogs) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.recs)
}

// An ACL that refuses a call's keys (here the user may use one name's
// keys only) fails that call, and only it: the Client keeps calling
// functions for the keys it may use.
func TestACLKeyRefusalKeepsFunctions(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 30*time.Second)
	admin := srv.Client(t)
	oneName := strings.Replace(aclSetUser, " ~redsem:* ", " ~redsem:{keys-allowed}:* ", 1)
	if oneName == aclSetUser {
		t.Fatal("aclSetUser has no ~redsem:* to narrow")
	}
	if err := admin.Do(ctx, aclArgs(oneName)...).Err(); err != nil {
		t.Fatal(err)
	}
	rdb := srv.Client(t, func(o *redis.Options) { o.Username, o.Password = "redsem", "password" })
	c := redistest.Limiter(t, rdb)
	allowed, err := c.Mutex("keys-allowed")
	if err != nil {
		t.Fatal(err)
	}
	if l, err := allowed.TryAcquire(ctx); err != nil || l.Release(ctx) != nil { // loads the library
		t.Fatal(err)
	}
	refused, err := c.Mutex("keys-refused")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := refused.TryAcquire(ctx); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("TryAcquire on keys the ACL refuses: %v, want NOPERM", err)
	}
	srv.ResetStats(t)
	l, err := allowed.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if calls := srv.CommandCalls(t); calls["fcall"] != 2 || calls["evalsha"]+calls["eval"] != 0 {
		t.Fatalf("a cycle after a key refusal: %v, want both scripts by FCALL", calls)
	}
}

// aclRatesAndPauses runs a rate limit, a fleet rate and a pause of the
// name "acl" (lifted again).
// aclExpiry lets a lease end at its TTL: the next acquisition, finding
// the semaphore full, sweeps it (hincrby: the total in the state).
func aclExpiry(ctx context.Context, t *testing.T, c *limiter.Client) {
	t.Helper()
	const ttl = 200 * time.Millisecond
	sem, err := c.Semaphore("acl-expiry", 1, limiter.TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	l, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal("TryAcquire:", err)
	}
	l.StopRefresh()
	time.Sleep(ttl + 100*time.Millisecond)
	if l, err = sem.TryAcquire(ctx); err != nil {
		t.Fatal("TryAcquire after the lease expired:", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal("Release:", err)
	}
}

func aclRatesAndPauses(ctx context.Context, t *testing.T, c *limiter.Client) {
	t.Helper()
	ins := inspect.New(c)
	rl, err := c.RateLimit("acl", limiter.Rate{Events: 100, Per: time.Second, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := rl.Allow(ctx); !ok || err != nil {
		t.Fatalf("Allow: %v, %v", ok, err)
	}
	if err := ins.SetRate(ctx, "acl", limiter.Rate{Events: 50, Per: time.Second, Burst: 1}); err != nil {
		t.Fatal("SetRate:", err)
	}
	if err := ins.SetRate(ctx, "acl", limiter.Rate{}); err != nil {
		t.Fatal("SetRate(clear):", err)
	}
	if _, err := ins.Pause(ctx, "acl", time.Minute); err != nil {
		t.Fatal("Pause:", err)
	}
	if st, err := ins.Rate(ctx, "acl"); err != nil || st.Paused < 50*time.Second {
		t.Fatalf("Rate: %+v, %v; want paused ~1m", st, err)
	}
	if err := ins.Unpause(ctx, "acl"); err != nil {
		t.Fatal("Unpause:", err)
	}
}
