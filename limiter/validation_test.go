package limiter_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

func TestBadInput(t *testing.T) {
	// No command reaches Redis for bad input, so an unreachable address is
	// enough and proves validation happens before any round trip.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	var nilClient *redis.Client
	ctx := context.Background()

	newClient := func(opts ...limiter.Option) func() error {
		return func() error { _, err := limiter.New(rdb, opts...); return err }
	}
	newSem := func(opts ...limiter.NameOption) func() error {
		return func() error { _, err := newSemaphore(t, rdb, "n", 3, opts...); return err }
	}
	sem, err := newSemaphore(t, rdb, "n", 3)
	if err != nil {
		t.Fatal(err)
	}
	ins := inspect.New(clientFor(t, rdb))
	valid := limiter.Ticket{Name: "n", ID: "x", Weight: 1, Token: 7}
	withTicket := func(mod func(*limiter.Ticket)) func() error {
		return func() error {
			tk := valid
			mod(&tk)
			_, err := sem.Resume(ctx, tk)
			return err
		}
	}
	cases := []struct {
		name, arg string
		call      func() error
	}{
		{"nil client", "rdb", func() error { _, err := limiter.New(nil); return err }},
		{"typed nil client", "rdb", func() error { _, err := limiter.New(nilClient); return err }},
		{"client option", "TTL", func() error { _, err := limiter.New(rdb, limiter.TTL(-1)); return err }},
		{"release timeout", "ReleaseTimeout", newSem(limiter.ReleaseTimeout(0))},
		{"nil ctx", "ctx", func() error { _, err := sem.Acquire(nil); return err }}, //nolint:staticcheck // on purpose
		{"nil ctx try", "ctx", func() error { _, err := sem.TryAcquire(nil); return err }},
		{"empty name", "name", func() error { _, err := newSemaphore(t, rdb, "", 1); return err }},
		{"empty mutex name", "name", func() error { _, err := newMutex(t, rdb, ""); return err }},
		{"limit 0", "limit", func() error { _, err := newSemaphore(t, rdb, "n", 0); return err }},
		{"negative limit", "limit", func() error { _, err := newSemaphore(t, rdb, "n", -2); return err }},
		{"TTL 0", "TTL", newSem(limiter.TTL(0))},
		{"negative TTL", "TTL", newSem(limiter.TTL(-time.Second))},
		{"TTL below 1ms", "TTL", newSem(limiter.TTL(time.Microsecond))},
		{"TTL below MinTTL", "TTL", newSem(limiter.TTL(limiter.MinTTL - time.Millisecond))},
		{"TTL of 5ms", "TTL", newSem(limiter.TTL(5 * time.Millisecond))},
		{"TTL above 24h", "TTL", newSem(limiter.TTL(24*time.Hour + 1))},
		{"TTL of MaxInt64", "TTL", newSem(limiter.TTL(math.MaxInt64))},
		{"quarantine above 24h", "RestartQuarantine", newSem(limiter.RestartQuarantine(24*time.Hour + 1))},
		{"refresh = TTL", "RefreshInterval", newSem(limiter.TTL(time.Second), limiter.RefreshInterval(time.Second))},
		{"refresh > TTL", "RefreshInterval", newSem(limiter.TTL(time.Second), limiter.RefreshInterval(2*time.Second))},
		{"negative refresh", "RefreshInterval", newSem(limiter.RefreshInterval(-1))},
		{"negative acquire timeout", "AcquireTimeout", newSem(limiter.AcquireTimeout(-1))},
		{"prefix with brace", "Prefix", newClient(limiter.Prefix("a{b"))},
		{"prefix with closing brace", "Prefix", newClient(limiter.Prefix("a}"))},
		{"drift too large", "ClockDrift", newSem(limiter.ClockDrift(0.7))},
		{"drift NaN", "ClockDrift", newSem(limiter.ClockDrift(math.NaN()))},
		{"negative quarantine", "RestartQuarantine", newSem(limiter.RestartQuarantine(-time.Second))},
		{"negative replicas", "WaitReplicas", newSem(limiter.WaitReplicas(-1, time.Second))},
		{"replicas without timeout", "WaitReplicas", newSem(limiter.WaitReplicas(1, 0))},
		{"replica wait = TTL", "WaitReplicas", newSem(limiter.TTL(time.Second), limiter.WaitReplicas(1, time.Second))},
		{"replica wait past ReadTimeout", "WaitReplicas", newSem(limiter.WaitReplicas(1, 5*time.Second))},
		{"replicas on a client", "WaitReplicas", func() error { _, err := limiter.New(rdb, limiter.WaitReplicas(-1, 0)); return err }},
		{"replicas on Redlock", "WaitReplicas", func() error {
			_, err := limiter.NewRedlock([]redis.UniversalClient{rdb}, limiter.WaitReplicas(1, time.Second))
			return err
		}},
		{"replicas on a Redlock semaphore", "WaitReplicas", func() error {
			c, err := limiter.NewRedlock([]redis.UniversalClient{rdb})
			if err != nil {
				return err
			}
			defer c.Close(ctx)
			_, err = c.Semaphore("n", 1, limiter.WaitReplicas(1, time.Second))
			return err
		}},
		{"nil ctx close", "ctx", func() error { return clientFor(t, rdb).Close(nil) }},                         //nolint:staticcheck // on purpose
		{"nil ctx do", "ctx", func() error { return sem.Do(nil, func(context.Context) error { return nil }) }}, //nolint:staticcheck // on purpose
		{"nil ctx resume", "ctx", func() error { _, err := sem.Resume(nil, limiter.Ticket{}); return err }},    //nolint:staticcheck // on purpose
		{"nil ctx release ticket", "ctx", func() error { return sem.ReleaseTicket(nil, limiter.Ticket{}) }},    //nolint:staticcheck // on purpose
		{"nil ctx holders", "ctx", func() error { _, err := ins.Holders(nil, "n"); return err }},               //nolint:staticcheck // on purpose
		{"nil ctx waiters", "ctx", func() error { _, err := ins.Waiters(nil, "n"); return err }},               //nolint:staticcheck // on purpose
		{"nil ctx limit", "ctx", func() error { _, err := ins.Limit(nil, "n"); return err }},                   //nolint:staticcheck // on purpose
		{"nil ctx set limit", "ctx", func() error { return ins.SetLimit(nil, "n", 2) }},                        //nolint:staticcheck // on purpose
		{"nil ctx names", "ctx", func() error { _, err := ins.Names(nil, "*"); return err }},                   //nolint:staticcheck // on purpose
		{"empty name holders", "name", func() error { _, err := ins.Holders(ctx, ""); return err }},
		{"empty name waiters", "name", func() error { _, err := ins.Waiters(ctx, ""); return err }},
		{"empty name limit", "name", func() error { _, err := ins.Limit(ctx, ""); return err }},
		{"empty name set limit", "name", func() error { return ins.SetLimit(ctx, "", 2) }},
		{"negative set limit", "n", func() error { return ins.SetLimit(ctx, "n", -1) }},
		{"set limit too large", "n", func() error { return ins.SetLimit(ctx, "n", 1<<40+1) }},
		{"nil fn", "fn", func() error { return sem.Do(ctx, nil) }},
		{"weight 0", "Weight", func() error { _, err := sem.TryAcquire(ctx, limiter.Weight(0)); return err }},
		{"weight above limit", "Weight", func() error { _, err := sem.Acquire(ctx, limiter.Weight(4)); return err }},
		{"weight above limit in Do", "Weight", func() error {
			return sem.Do(ctx, func(context.Context) error { return nil }, limiter.Weight(9))
		}},
		{"empty id", "ID", func() error { _, err := sem.TryAcquire(ctx, limiter.ID("")); return err }},
		{"ticket garbage", "ticket", func() error { _, err := limiter.ParseTicket("hello"); return err }},
		{"ticket bad weight", "ticket", func() error {
			_, err := limiter.ParseTicket("redsem1:id=x&name=n&token=1&weight=w")
			return err
		}},
		{"ticket bad token", "ticket", func() error {
			_, err := limiter.ParseTicket("redsem1:id=x&name=n&token=&weight=1")
			return err
		}},
		{"ticket without id", "ticket", func() error {
			_, err := limiter.ParseTicket("redsem1:name=n&token=1&weight=1")
			return err
		}},
		{"ticket of another name", "ticket", withTicket(func(tk *limiter.Ticket) { tk.Name = "other" })},
		{"ticket weight 0", "ticket", withTicket(func(tk *limiter.Ticket) { tk.Weight = 0 })},
		{"ticket token 0", "ticket", withTicket(func(tk *limiter.Ticket) { tk.Token = 0 })},
		{"ticket without name", "ticket", func() error {
			tk := valid
			tk.Name = ""
			return sem.ReleaseTicket(ctx, tk)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			var arg *limiter.ArgumentError
			if !errors.Is(err, limiter.ErrInvalidArgument) || !errors.As(err, &arg) || arg.Arg != c.arg {
				t.Fatalf("want an ArgumentError for %q, got %v", c.arg, err)
			}
		})
	}
}

func TestTicketText(t *testing.T) {
	in := limiter.Ticket{Name: "exports {nightly} & more=1", ID: "id/with?odd&chars", Weight: 3, Token: 1763769600123456}
	out, err := limiter.ParseTicket(in.String())
	if err != nil || out != in {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
	var viaText limiter.Ticket
	b, _ := in.MarshalText()
	if err := viaText.UnmarshalText(b); err != nil || viaText != in {
		t.Fatalf("text round trip: %+v, %v", viaText, err)
	}
}

// A held lease given a nil context: a typed error, and the lease is still
// held (nothing panics, nothing is released by accident).
func TestNilContextOnALease(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := ctxT(t, 10*time.Second)
	mu, _ := newMutex(t, srv.Client(t), "nilctx")
	l, err := mu.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"Release": func() error { return l.Release(nil) },                                         //nolint:staticcheck // on purpose
		"Refresh": func() error { return l.Refresh(nil) },                                         //nolint:staticcheck // on purpose
		"Run":     func() error { return l.Run(nil, func(context.Context) error { return nil }) }, //nolint:staticcheck // on purpose
		"Run fn":  func() error { return l.Run(ctx, nil) },
	} {
		var arg *limiter.ArgumentError
		if err := call(); !errors.As(err, &arg) {
			t.Fatalf("%s with nil: %v, want an ArgumentError", name, err)
		}
	}
	if l.Err() != nil {
		t.Fatalf("the lease ended: %v", l.Err())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
