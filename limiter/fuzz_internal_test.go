package limiter

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/limiter/internal/store"
)

// These fuzz targets live inside the package because the key layout
// (newKeyspace, statePattern, nameOfStateKey) and acquire-option
// validation (Semaphore.request) have no exported entry point that sends
// nothing to Redis.

// FuzzParseTicket checks that ParseTicket never panics on any text, that
// whatever it rejects is an *ArgumentError for "ticket" (UnmarshalText
// agreeing), and that whatever it accepts is a valid ticket that
// round-trips exactly through String, MarshalText/UnmarshalText and JSON.
func FuzzParseTicket(f *testing.F) {
	for _, s := range []string{
		"",
		"redsem1:",
		"redsem1",
		"redsem2:id=x&name=n&token=1&weight=1",
		"redsem1:id=x&name=n&token=1&weight=1",
		"redsem1:id=x&name=%7Bn%7D&token=1&weight=1",
		"redsem1:id=x&name=%25&token=1&weight=1",
		"redsem1:id=x&name=%&token=1&weight=1",
		"redsem1:id=x&name=%zz&token=1&weight=1",
		"redsem1:id=x;y&name=n&token=1&weight=1",
		"redsem1:id=%E2%9C%93&name=%C3%A9t%C3%A9&token=1&weight=1",
		"redsem1:id=%FF&name=%00&token=1&weight=1",
		"redsem1:id=x&name=n&token=9223372036854775807&weight=9223372036854775807",
		"redsem1:id=x&name=n&token=9223372036854775808&weight=1",
		"redsem1:id=x&name=n&token=-1&weight=1",
		"redsem1:id=x&name=n&token=1&weight=0",
		"redsem1:id=x&name=n&token=+1&weight=+1",
		"redsem1:id=x&name=n&token=NaN&weight=1",
		"redsem1:id=x&name=n&token=1e3&weight=1",
		"redsem1:id=x&id=y&name=n&name=m&token=1&weight=1&extra=1",
		"redsem1:name=n&token=1&weight=1",
		"redsem1:id=&name=n&token=1&weight=1",
		"redsem1:id=x+y&name=a+b&token=1&weight=1",
		"redsem1:redsem1:id=x&name=n&token=1&weight=1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tk, err := ParseTicket(s)
		var viaText Ticket
		textErr := viaText.UnmarshalText([]byte(s))
		if err != nil {
			wantArgError(t, err, "ticket")
			if textErr == nil || viaText != (Ticket{}) {
				t.Fatalf("UnmarshalText(%q) = %+v, %v; ParseTicket failed with %v", s, viaText, textErr, err)
			}
			return
		}
		if textErr != nil || viaText != tk {
			t.Fatalf("UnmarshalText(%q) = %+v, %v; ParseTicket gave %+v", s, viaText, textErr, tk)
		}
		if err := tk.validate(); err != nil {
			t.Fatalf("ParseTicket(%q) accepted an invalid ticket %+v: %v", s, tk, err)
		}
		checkTicketRoundTrip(t, tk)
	})
}

// FuzzTicketRoundTrip checks, from the fields rather than the text, that
// every valid Ticket round-trips exactly through its text and JSON forms
// (whatever bytes its name and id hold) and that the text of an invalid
// one is rejected with an *ArgumentError for "ticket".
func FuzzTicketRoundTrip(f *testing.F) {
	f.Add("n", "x", int64(1), int64(1))
	f.Add("", "x", int64(1), int64(1))
	f.Add("n", "", int64(1), int64(1))
	f.Add("{n}", "}{", int64(2), int64(3))
	f.Add("%", "%25", int64(1), int64(1))
	f.Add("a&b=c;d", "?#/ +", int64(1), int64(1))
	f.Add("été ✓", "\x00\xff", int64(1), int64(1))
	f.Add("redsem1:name=n", "id=x", int64(math.MaxInt64), int64(math.MaxInt64))
	f.Add("n", "x", int64(0), int64(1))
	f.Add("n", "x", int64(1), int64(-1))
	f.Add("n", "x", int64(math.MinInt64), int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, name, id string, weight, token int64) {
		tk := Ticket{Name: name, ID: id, Weight: weight, Token: token}
		got, err := ParseTicket(tk.String())
		if tk.validate() != nil {
			wantArgError(t, err, "ticket")
			return
		}
		if err != nil || got != tk {
			t.Fatalf("ParseTicket(%q) = %+v, %v; want %+v", tk.String(), got, err, tk)
		}
		checkTicketRoundTrip(t, tk)
	})
}

func checkTicketRoundTrip(t *testing.T, tk Ticket) {
	t.Helper()
	s := tk.String()
	if back, err := ParseTicket(s); err != nil || back != tk {
		t.Fatalf("ParseTicket(%q) = %+v, %v; want %+v", s, back, err, tk)
	}
	if b, err := tk.MarshalText(); err != nil || string(b) != s {
		t.Fatalf("MarshalText = %q, %v; String = %q", b, err, s)
	}
	// Tickets travel in JSON task payloads, where invalid UTF-8 would be
	// mangled: the text form must survive it.
	b, err := json.Marshal(tk)
	if err != nil {
		t.Fatalf("json.Marshal(%+v): %v", tk, err)
	}
	var back Ticket
	if err := json.Unmarshal(b, &back); err != nil || back != tk {
		t.Fatalf("json round trip of %+v via %s = %+v, %v", tk, b, back, err)
	}
}

// FuzzKeyspace checks the keys of a semaphore made through
// Client.Semaphore with any name, of a Client with any Prefix: an empty
// name or a prefix
// with a brace is an *ArgumentError; otherwise every key starts with the
// prefix, the three keys are distinct and share one non-empty Cluster
// hash tag, nameOfStateKey gives the name back from the state key (and
// takes no other key for one), and no key is shared with another name
// under the same prefix or with the same name under another prefix.
func FuzzKeyspace(f *testing.F) {
	for _, seed := range [][3]string{
		{DefaultPrefix, "n", "m"},
		{"", "n", ""},
		{DefaultPrefix, "", "n"},
		{"a{", "n", "m"},
		{"}", "n", "m"},
		{DefaultPrefix, "{", "}"},
		{DefaultPrefix, "{}", "%7B%7D"},
		{DefaultPrefix, "%", "%25"},
		{DefaultPrefix, "%7B", "{"},
		{DefaultPrefix, "%%7D", "%}"},
		{DefaultPrefix, "a}:state", "a"},
		{DefaultPrefix, "x}:leases", "x}:queue"},
		{"p:", "n}:state", "p:{n"},
		{"p", ":{n", "p:"},
		{"redsem:x", "y", "redsem:"},
		{"été:", "✓ \x00\xff", "✓"},
		{"*?[]\\", "*", "?"},
		{strings.Repeat("p", 1000), strings.Repeat("{}%", 1000), strings.Repeat("}", 1000)},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	_, rdb, sent := fuzzClient(f)
	// sem makes the semaphore name of a Client with prefix: the prefix is
	// a Client option. Neither sends anything.
	sem := func(prefix, name string) (*Semaphore, error) {
		c, err := New(rdb, Prefix(prefix))
		if err != nil {
			return nil, err
		}
		defer c.Close(context.Background())
		return c.Semaphore(name, 1)
	}
	f.Fuzz(func(t *testing.T, prefix, name, other string) {
		defer wantNothingSent(t, sent)
		s, err := sem(prefix, name)
		switch {
		case strings.ContainsAny(prefix, "{}"):
			wantArgError(t, err, "Prefix")
			return
		case name == "":
			wantArgError(t, err, "name")
			return
		case err != nil:
			t.Fatalf("Semaphore(%q) with Prefix(%q): %v", name, prefix, err)
		}
		keys := s.keys.Keys
		if len(keys) != 4 || len(slices.Compact(slices.Sorted(slices.Values(keys)))) != 4 {
			t.Fatalf("keys %q: want four distinct ones", keys)
		}
		tag := clusterHashTag(keys[0])
		if tag == "" {
			t.Fatalf("key %q has no hash tag: its keys may land in different Cluster slots", keys[0])
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, prefix) {
				t.Fatalf("key %q is outside the prefix %q", k, prefix)
			}
			if got := clusterHashTag(k); got != tag {
				t.Fatalf("keys %q: hash tags %q and %q differ", keys, tag, got)
			}
		}
		if got, ok := store.NameOfStateKey(keys[1]); !ok || got != name {
			t.Fatalf("store.NameOfStateKey(%q) = %q, %v; want %q", keys[1], got, ok, name)
		}
		for _, k := range []string{keys[0], keys[2], keys[3]} {
			if got, ok := store.NameOfStateKey(k); ok {
				t.Fatalf("store.NameOfStateKey(%q) took a non-state key for the state of %q", k, got)
			}
		}
		if other != name {
			if o, err := sem(prefix, other); err == nil {
				wantNoSharedKey(t, keys, o.keys.Keys)
			}
		}
		if other != prefix {
			if o, err := sem(other, name); err == nil {
				wantNoSharedKey(t, keys, o.keys.Keys)
			}
		}
	})
}

// FuzzOptions checks Client, Semaphore and Mutex construction and the
// acquire options with arbitrary values, split arbitrarily between New
// and Client.Semaphore: nothing panics or reaches Redis; an error is an
// *ArgumentError naming an argument whose value, as given or as derived
// from what was given, breaks a documented bound; and when no bound is
// broken, construction succeeds with a config a lease can live with.
func FuzzOptions(f *testing.F) {
	second, ms, day := int64(time.Second), int64(time.Millisecond), int64(24*time.Hour)
	add := func(name string, limit int64, mask uint32, ttl, refresh, acquire, node, release, maxHold int64,
		drift float64, attempts int, prefix, id string, weight int64) {
		f.Add(name, limit, mask, ttl, refresh, acquire, node, release, maxHold, drift, attempts, prefix, id, weight)
	}
	add("n", 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, "", "", 0)
	add("n", 3, 1<<9|optIDGiven|optWeightGiven, 10*second, 3*second, 10*second, 0, second, 0, 0.01, 0, DefaultPrefix, "id", 2)
	add("", 0, 1<<9, 0, 0, 0, 0, 0, 0, 0, 0, "", "", 0)
	add("n", -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, "", "", 0)
	add("n", 1<<40, optWeightGiven, 0, 0, 0, 0, 0, 0, 0, 0, "", "", 1<<40)
	add("n", 1<<40+1, 0, 0, 0, 0, 0, 0, 0, 0, 0, "", "", 0)
	add("n", math.MaxInt64, optWeightGiven, 0, 0, 0, 0, 0, 0, 0, 0, "", "", math.MaxInt64)
	add("{n}", 2, optWeightGiven, 0, 0, 0, 0, 0, 0, 0, 0, "", "", 3)
	add("n", 2, optWeightGiven, 0, 0, 0, 0, 0, 0, 0, 0, "", "", 0)
	add("n", 2, optWeightGiven, 0, 0, 0, 0, 0, 0, 0, 0, "", "", math.MinInt64)
	add("n", 2, optIDGiven, 0, 0, 0, 0, 0, 0, 0, 0, "", "", 0)
	add("n", 2, optIDGiven|optNilCtx|optNilAcquireOption, 0, 0, 0, 0, 0, 0, 0, 0, "", "%{é}", 0)
	add("n", 1, 1<<0|1<<1, 5*ms, 0, 0, 0, 0, 0, 0, 0, "", "", 0)
	add("n", 1, 1<<0, 5*ms-1, 0, 0, 0, 0, 0, 0, 0, "", "", 0)
	add("n", 1, 1<<0|1<<5, 5*ms, 0, 0, 0, 0, 0, 0.49, 0, "", "", 0)
	add("n", 1, 1<<0|1<<1|1<<5, 5*ms, 0, 0, 0, 0, 0, 0.49, 0, "", "", 0)
	add("n", 1, 1<<0|1<<1|optMutex, math.MaxInt64, math.MaxInt64-1, 0, 0, 0, 0, 0, 0, "", "", 0)
	add("n", 1, 1<<0|1<<5|1<<6|1<<8, math.MaxInt64, 0, 0, math.MaxInt64-1, 0, math.MaxInt64, 0.4999999999, 0, "", "", 0)
	add("n", 1, 1<<0|1<<6, second, 0, 0, second, 0, 0, 0, 0, "", "", 0)
	add("n", 1, 1<<6|1<<(10+6), 0, 0, 0, -1, 0, 0, 0, 0, "", "", 0)
	add("n", 1, 1<<1|1<<(10+1), 0, -1, 0, 0, 0, 0, 0, 0, "", "", 0)
	add("n", 1, 1<<1|1<<(10+1)|1<<0, second, 3*second, 0, 0, 0, 0, 0, 0, "", "", 0)
	add("n", 1, 1<<2|1<<3|1<<7|1<<8, 0, 0, -1, 0, 0, -1, 0, -1, "", "", 0)
	add("n", 1, 1<<2|1<<7, 0, 0, math.MaxInt64, 0, math.MinInt64, 0, 0, 0, "", "", 0)
	add("n", 1, 1<<5, 0, 0, 0, 0, 0, 0, math.NaN(), 0, "", "", 0)
	add("n", 1, 1<<5, 0, 0, 0, 0, 0, 0, math.Inf(1), 0, "", "", 0)
	add("n", 1, 1<<5|1<<(10+5), 0, 0, 0, 0, 0, 0, math.Inf(-1), 0, "", "", 0)
	add("n", 1, 1<<5, 0, 0, 0, 0, 0, 0, math.Copysign(0, -1), 0, "", "", 0)
	add("n", 1, 1<<5, 0, 0, 0, 0, 0, 0, 0.5, 0, "", "", 0)
	add("n", 1, 1<<5, 0, 0, 0, 0, 0, 0, -math.SmallestNonzeroFloat64, 0, "", "", 0)
	add("n", 1, 1<<4, 0, 0, 0, 0, 0, 0, 0, 0, "a{b", "", 0)
	add("n", 1, 1<<4|1<<(10+4), 0, 0, 0, 0, 0, 0, 0, 0, "}", "", 0)
	add("n", 1, 1<<4, 0, 0, 0, 0, 0, 0, 0, 0, "%*?[]\\ é\x00", "", 0)
	add("n", 1, 1<<0|1<<1|1<<(10+0), day, day-1, 0, 0, 0, 0, 0, 0, "", "", 0)
	add("n", 1, 1<<0|1<<(10+0), math.MinInt64, 0, 0, 0, 0, 0, 0, 0, "", "", 0)
	add("n", 1, 1<<3, 0, 0, 0, 0, 0, 0, 0, math.MaxInt, "", "", 0)

	c, rdb, sent := fuzzClient(f)
	f.Fuzz(func(t *testing.T, name string, limit int64, mask uint32, ttl, refresh, acquire, node, release, maxHold int64,
		drift float64, attempts int, prefix, id string, weight int64) {
		defer wantNothingSent(t, sent)
		values := []struct {
			arg string
			opt Option
		}{
			{"TTL", TTL(time.Duration(ttl))},
			{"RefreshInterval", RefreshInterval(time.Duration(refresh))},
			{"AcquireTimeout", AcquireTimeout(time.Duration(acquire))},
			{"", nil}, // was AttemptsLimit: its bit and argument are kept so the seeds keep their meaning
			{"Prefix", Prefix(prefix)},
			{"ClockDrift", ClockDrift(drift)},
			{"NodeTimeout", NodeTimeout(time.Duration(node))},
			{"ReleaseTimeout", ReleaseTimeout(time.Duration(release))},
			{"MaxHold", MaxHold(time.Duration(maxHold))},
		}
		var clientOpts []Option
		var semOpts []NameOption
		for i, v := range values {
			perName, ok := v.opt.(NameOption)
			switch {
			case mask&(1<<i) == 0:
			case mask&(1<<(10+i)) != 0 || !ok: // a Client's alone, by its type
				clientOpts = append(clientOpts, v.opt)
			default:
				semOpts = append(semOpts, perName)
			}
		}
		if mask&(1<<9) != 0 {
			semOpts = append(semOpts, nil, Logger(nil), Observe(nil), OnLost(nil))
		}
		// The bounds are checked on what the options leave, so apply them
		// as the Client does and judge the result by the documented rules.
		want := withOnly(withOnly(defaultConfig(), clientOpts), semOpts)
		broken := brokenBounds(want)

		cl := c
		if len(clientOpts) > 0 {
			var err error
			if cl, err = New(rdb, clientOpts...); err != nil {
				wantArgError(t, err, brokenBounds(withOnly(defaultConfig(), clientOpts))...)
				return
			}
			defer func() {
				if err := cl.Close(context.Background()); err != nil {
					t.Errorf("Close: %v", err)
				}
			}()
		}
		var s *Semaphore
		var err error
		if mask&optMutex != 0 {
			limit = 1
			s, err = cl.Mutex(name, semOpts...)
		} else {
			s, err = cl.Semaphore(name, limit, semOpts...)
		}
		if name == "" {
			broken = append(broken, "name")
		}
		if limit < 1 || limit > maxLimit {
			broken = append(broken, "limit")
		}
		if len(broken) > 0 {
			wantArgError(t, err, broken...)
			return
		}
		if err != nil {
			t.Fatalf("no bound broken, yet: %v", err)
		}
		if s.Name() != name || s.Limit() != limit {
			t.Fatalf("semaphore %q of %d, want %q of %d", s.Name(), s.Limit(), name, limit)
		}
		// A config that passed must leave a lease time to be refreshed
		// before its holder counts it lost.
		cfg := s.cfg
		if hold := cfg.ttl - cfg.drift(cfg.ttl); hold <= 0 || cfg.refresh < 0 || cfg.refresh >= hold {
			t.Fatalf("accepted TTL %v, drift %v, refresh %v", cfg.ttl, cfg.drift(cfg.ttl), cfg.refresh)
		}
		if !cfg.refreshSet && cfg.refresh != cfg.ttl/3 {
			t.Fatalf("refresh %v with TTL %v: want the default TTL/3", cfg.refresh, cfg.ttl)
		}
		if w := cfg.nodeWait(); w <= 0 || w >= cfg.ttl {
			t.Fatalf("accepted node wait %v with TTL %v", w, cfg.ttl)
		}
		checkRequest(t, s, mask, id, weight)
	})
}

// Bits of FuzzOptions' mask beyond the options' own (0-9: which options
// are given; 10-18: given to New rather than to Client.Semaphore).
const (
	optMutex            = 1 << 20
	optIDGiven          = 1 << 21
	optWeightGiven      = 1 << 22
	optNilCtx           = 1 << 23
	optNilAcquireOption = 1 << 24
)

// checkRequest validates acquire options the way Acquire and TryAcquire
// do, without their round trip.
func checkRequest(t *testing.T, s *Semaphore, mask uint32, id string, weight int64) {
	t.Helper()
	ctx := context.Background()
	var broken []string
	if mask&optNilCtx != 0 {
		ctx = nil
		broken = append(broken, "ctx")
	}
	var opts []AcquireOption
	if mask&optNilAcquireOption != 0 {
		opts = append(opts, nil)
	}
	wantWeight := int64(1)
	if mask&optWeightGiven != 0 {
		opts = append(opts, Weight(weight))
		wantWeight = weight
	}
	if wantWeight < 1 || wantWeight > s.limit {
		broken = append(broken, "Weight")
	}
	if mask&optIDGiven != 0 {
		opts = append(opts, ID(id))
		if id == "" {
			broken = append(broken, "ID")
		}
	}
	r, _, err := s.request(ctx, opts)
	if len(broken) > 0 {
		wantArgError(t, err, broken...)
		return
	}
	switch {
	case err != nil:
		t.Fatalf("request with weight %d, id %q: %v", wantWeight, id, err)
	case r.Weight != wantWeight || r.TTL != s.cfg.ttl || r.Limit != s.limit:
		t.Fatalf("request %+v: want weight %d, TTL %v, limit %d", r, wantWeight, s.cfg.ttl, s.limit)
	case mask&optIDGiven != 0 && (r.ID != id || !r.IDGiven):
		t.Fatalf("request id %q (given %v), want %q", r.ID, r.IDGiven, id)
	case mask&optIDGiven == 0 && (r.ID == "" || r.IDGiven):
		t.Fatalf("request id %q (given %v), want one made up", r.ID, r.IDGiven)
	}
}

// withOnly applies opts without validating, for judging them.
func withOnly[O Option](c config, opts []O) config {
	for _, o := range opts {
		if Option(o) != nil {
			o.apply(&c)
		}
	}
	return c
}

// brokenBounds lists the options whose documented bound c breaks.
// RefreshInterval is listed when its default, TTL/3, is too long for the
// TTL and ClockDrift given: the option then names what must change.
func brokenBounds(c config) []string {
	var out []string
	add := func(bad bool, arg string) {
		if bad {
			out = append(out, arg)
		}
	}
	add(c.ttl < MinTTL || c.ttl > maxTTL, "TTL")
	add(!(c.clockDrift >= 0 && c.clockDrift < 0.5), "ClockDrift")
	refresh := c.refresh
	if !c.refreshSet {
		refresh = c.ttl / 3
	}
	add(refresh < 0 || refresh >= c.ttl-c.drift(c.ttl), "RefreshInterval")
	add(c.acquireTimeout < 0, "AcquireTimeout")
	add(strings.ContainsAny(c.prefix, "{}"), "Prefix")
	add(c.nodeTimeout < 0 || c.nodeTimeout >= c.ttl, "NodeTimeout")
	add(c.maxHold < 0, "MaxHold")
	add(c.releaseTimeout <= 0, "ReleaseTimeout")
	return out
}

// fuzzClient returns a Client of an address nothing listens on, shared by
// a target's iterations, and a count of the commands and dials it tried:
// validation must need no round trip, and a stray command fails there
// rather than touching a real server.
func fuzzClient(f *testing.F) (*Client, *redis.Client, *atomic.Int64) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	sent := &atomic.Int64{}
	rdb.AddHook(countingHook{sent})
	c, err := New(rdb, RestartQuarantine(0))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			f.Error(err)
		}
		_ = rdb.Close()
	})
	return c, rdb, sent
}

type countingHook struct{ n *atomic.Int64 }

func (h countingHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.n.Add(1)
		return next(ctx, network, addr)
	}
}

func (h countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

func wantNothingSent(t *testing.T, sent *atomic.Int64) {
	t.Helper()
	if n := sent.Load(); n != 0 {
		t.Fatalf("%d command(s) or dial(s) reached Redis", n)
	}
}

// wantArgError fails unless err is an *ArgumentError, matching
// ErrInvalidArgument, for one of args.
func wantArgError(t *testing.T, err error, args ...string) {
	t.Helper()
	var arg *ArgumentError
	if !errors.As(err, &arg) || !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("got %v, want an ArgumentError for one of %q", err, args)
	}
	if !slices.Contains(args, arg.Arg) || arg.Reason == "" || !strings.Contains(err.Error(), arg.Arg) {
		t.Fatalf("got an ArgumentError for %q (%v), want one of %q", arg.Arg, err, args)
	}
}

func wantNoSharedKey(t *testing.T, a, b []string) {
	t.Helper()
	for _, k := range a {
		if slices.Contains(b, k) {
			t.Fatalf("key %q is in both %q and %q", k, a, b)
		}
	}
}

// clusterHashTag is what Redis Cluster hashes a key by, when not the
// whole key: what lies between its first '{' and the next '}', if not
// empty.
func clusterHashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return ""
	}
	return key[open+1 : open+1+end]
}
