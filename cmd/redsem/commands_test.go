package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/namestate"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
	"github.com/redsem/redsem/limiter/inspect"
)

func ptr(n int64) *int64 { return &n }

// lines splits text output into lines of whitespace-separated fields.
// inUse is the limits in use of a name that one process uses at limit.
func inUse(limit int64) []namestate.LimitInUse {
	return []namestate.LimitInUse{{Limit: limit, Processes: 1}}
}

func lines(out string) [][]string {
	var ls [][]string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		ls = append(ls, strings.Fields(l))
	}
	return ls
}

// twoSemaphores holds leases a (2 permits) and b (1) on "jobs" (limit 5,
// no fleet limit), x (1) on "api:github" (fleet limit 3 over a limit of
// 10), and one lease under another prefix, which ls must not show.
func twoSemaphores(t *testing.T, f *fixture) (a, b, x *limiter.Lease) {
	t.Helper()
	jobs := f.sem(t, "jobs", 5)
	a = f.hold(t, jobs, "a", 2)
	b = f.hold(t, jobs, "b", 1)
	api := f.sem(t, "api:github", 10)
	if err := inspect.New(f.holder).SetLimit(f.ctx(), api.Name(), 3); err != nil {
		t.Fatal(err)
	}
	x = f.hold(t, api, "x", 1)

	other := redistest.Limiter(t, f.rdb) // the default prefix
	s, err := other.Semaphore("elsewhere", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(f.ctx(), limiter.ID("o")); err != nil { // not the holder's: f.hold would wait for its record
		t.Fatal(err)
	}
	return a, b, x
}

// queued fills "queued" (limit 3) with lease q (3 permits) and queues
// three real waiting Acquires of 2, 1 and 3 permits, in this order.
func queued(t *testing.T, f *fixture) (*limiter.Lease, []inspect.Waiter) {
	t.Helper()
	s := f.sem(t, "queued", 3, limiter.AcquireTimeout(0))
	q := f.hold(t, s, "q", 3)
	ws := f.queue(t, s, 2, 1, 3)
	if len(ws) != 3 || ws[0].Weight != 2 || ws[1].Weight != 1 || ws[2].Weight != 3 {
		t.Fatalf("the limiter's queue: %+v, want weights 2, 1, 3", ws)
	}
	return q, ws
}

func TestLs(t *testing.T) {
	f := newFixture(t)
	twoSemaphores(t, f)
	queued(t, f)

	out := f.run(t, func(w *bytes.Buffer) error { return ls(f.ctx(), w, f.cli, "", false) })
	want := [][]string{
		{"NAME", "KIND", "LIMIT", "IN", "USE", "HOLDERS", "WAITERS", "NEXT", "FREE", "PAUSED"},
		{"api:github", "semaphore", "3", "1", "1", "0", "-", "-"},
		// The limits in code, as the Clients recorded them (issue 32).
		{"jobs", "semaphore", "5", "3", "2", "0", "-", "-"},
		{"queued", "semaphore", "3", "3", "1", "3", "-", "-"},
	}
	if got := lines(out); !reflect.DeepEqual(got, want) {
		t.Errorf("ls:\n%s\nwant rows %q", out, want)
	}

	out = f.run(t, func(w *bytes.Buffer) error { return ls(f.ctx(), w, f.cli, "", true) })
	var entries []namestate.Entry
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		t.Fatalf("ls -json is not JSON: %v\n%s", err, out)
	}
	wantJSON := []namestate.Entry{
		{Name: "api:github", Kind: namestate.KindSemaphore, FleetLimit: ptr(3), Limits: inUse(10), Rates: []namestate.RateInUse{}, InUse: 1, Holders: 1, Waiters: 0},
		{Name: "jobs", Kind: namestate.KindSemaphore, FleetLimit: nil, Limits: inUse(5), Rates: []namestate.RateInUse{}, InUse: 3, Holders: 2, Waiters: 0},
		{Name: "queued", Kind: namestate.KindSemaphore, FleetLimit: nil, Limits: inUse(3), Rates: []namestate.RateInUse{}, InUse: 3, Holders: 1, Waiters: 3},
	}
	if !reflect.DeepEqual(entries, wantJSON) {
		t.Errorf("ls -json:\n%s", out)
	}
	if !strings.Contains(out, `"fleet_limit": null`) || !strings.Contains(out, `"waiters": 0`) {
		t.Errorf("ls -json: no fleet limit must be null and no waiters 0, not left out:\n%s", out)
	}

	// A glob selects; no match is an empty list, in JSON too.
	out = f.run(t, func(w *bytes.Buffer) error { return ls(f.ctx(), w, f.cli, "j*", false) })
	if got := lines(out); len(got) != 2 || got[1][0] != "jobs" {
		t.Errorf("ls j*:\n%s", out)
	}
	out = f.run(t, func(w *bytes.Buffer) error { return ls(f.ctx(), w, f.cli, "nothing*", true) })
	if strings.TrimSpace(out) != "[]" {
		t.Errorf("ls -json with no match = %q, want []", out)
	}
	out = f.run(t, func(w *bytes.Buffer) error { return ls(f.ctx(), w, f.cli, "nothing*", false) })
	if strings.TrimSpace(out) != "no semaphores or rate limits" {
		t.Errorf("ls with no match = %q", out)
	}
}

func TestShow(t *testing.T) {
	f := newFixture(t)
	a, b, x := twoSemaphores(t, f)

	out := f.run(t, func(w *bytes.Buffer) error { return show(f.ctx(), w, f.cli, "jobs", false) })
	got := lines(out)
	head := [][]string{
		{"name:", "jobs"},
		{"limit:", "the", "processes'", "own:", "5", "(1", "proc)"},
		{"in", "use:", "3", "of", "5"},
		{"holders:", "2"},
		{"waiters:", "0"},
		{},
		{"ID", "WEIGHT", "TOKEN", "TTL"},
	}
	if len(got) != len(head)+2 || !reflect.DeepEqual(got[:len(head)], head) {
		t.Fatalf("show jobs:\n%s", out)
	}
	for i, l := range []*limiter.Lease{a, b} { // oldest grant first
		row := got[len(head)+i]
		want := []string{l.ID(), strconv.FormatInt(l.Weight(), 10), strconv.FormatInt(l.Token(), 10)}
		if !reflect.DeepEqual(row[:3], want) {
			t.Errorf("show jobs row %d = %q, want %q then a TTL", i, row, want)
		}
		if ttl, err := time.ParseDuration(row[3]); err != nil || ttl <= 0 || ttl > limiter.DefaultTTL {
			t.Errorf("show jobs row %d: TTL %q (%v), want in (0, %v]", i, row[3], err, limiter.DefaultTTL)
		}
	}

	out = f.run(t, func(w *bytes.Buffer) error { return show(f.ctx(), w, f.cli, "api:github", true) })
	var st namestate.State
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("show -json is not JSON: %v\n%s", err, out)
	}
	if st.Name != "api:github" || st.FleetLimit == nil || *st.FleetLimit != 3 || st.InUse != 1 || len(st.Holders) != 1 {
		t.Fatalf("show -json api:github:\n%s", out)
	}
	h := st.Holders[0]
	if h.ID != "x" || h.Weight != 1 || h.Token != x.Token() || h.TTLms <= 0 || h.TTLms > limiter.DefaultTTL.Milliseconds() {
		t.Errorf("show -json holder = %+v, want x, 1, token %d, a TTL", h, x.Token())
	}

	if len(st.Waiters) != 0 || !strings.Contains(out, `"waiters": []`) {
		t.Errorf("show -json api:github: waiters must be [], not null or left out:\n%s", out)
	}

	// A name nobody uses shows empty, with holders [] rather than null.
	out = f.run(t, func(w *bytes.Buffer) error { return show(f.ctx(), w, f.cli, "unused", true) })
	if !strings.Contains(out, `"holders": []`) || !strings.Contains(out, `"in_use": 0`) || !strings.Contains(out, `"waiters": []`) {
		t.Errorf("show -json unused:\n%s", out)
	}
}

// show lists the wait queue after the holders, in the order it is served.
func TestShowWaiters(t *testing.T) {
	f := newFixture(t)
	q, ws := queued(t, f)

	out := f.run(t, func(w *bytes.Buffer) error { return show(f.ctx(), w, f.cli, "queued", false) })
	got := lines(out)
	head := [][]string{
		{"name:", "queued"},
		{"limit:", "the", "processes'", "own:", "3", "(1", "proc)"},
		{"in", "use:", "3", "of", "3"},
		{"holders:", "1"},
		{"waiters:", "3"},
		{},
		{"ID", "WEIGHT", "TOKEN", "TTL"},
		{"q", "3", strconv.FormatInt(q.Token(), 10)},
		{},
		{"QUEUE", "WAIT", "ID", "WEIGHT", "TTL", "WHY", "ETA"},
	}
	if len(got) != len(head)+3 {
		t.Fatalf("show queued:\n%s", out)
	}
	for i, want := range head {
		g := got[i]
		if len(want) == 3 && want[0] == "q" && len(g) == 4 { // the holder's row ends with its TTL
			g = g[:3]
		}
		if !reflect.DeepEqual(g, want) {
			t.Fatalf("show queued line %d = %q, want %q\n%s", i, got[i], want, out)
		}
	}
	for i, w := range []int64{2, 1, 3} { // queue order
		row := got[len(head)+i]
		want := []string{strconv.Itoa(i + 1), ws[i].ID, strconv.FormatInt(w, 10)}
		if len(row) != 8 || !reflect.DeepEqual(row[:3], want) {
			t.Fatalf("show queued waiter row %d = %q, want %q then a TTL, why and ETA\n%s", i, row, want, out)
		}
		if why := row[4:7]; !reflect.DeepEqual(why, []string{"full,", strconv.Itoa(i), "ahead"}) || !strings.HasPrefix(row[7], "~") {
			t.Errorf("show queued waiter row %d: why %q, ETA %q; want full with %d ahead, an estimated ETA", i, why, row[7], i)
		}
		if ttl, err := time.ParseDuration(row[3]); err != nil || ttl <= 0 {
			t.Errorf("show queued waiter row %d: TTL %q (%v)", i, row[3], err)
		}
	}

	out = f.run(t, func(w *bytes.Buffer) error { return show(f.ctx(), w, f.cli, "queued", true) })
	var st namestate.State
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("show -json is not JSON: %v\n%s", err, out)
	}
	if len(st.Waiters) != 3 || len(st.Holders) != 1 || st.InUse != 3 {
		t.Fatalf("show -json queued:\n%s", out)
	}
	for i, w := range []int64{2, 1, 3} {
		got := st.Waiters[i]
		if got.ID != ws[i].ID || got.Weight != w || got.TTLms <= 0 {
			t.Errorf("show -json waiter %d = %+v, want id %s, weight %d, a TTL", i, got, ws[i].ID, w)
		}
		if got.Why.Reason != "full" || got.Why.Ahead != i || got.Why.ETAms == nil || !got.Why.Estimated {
			t.Errorf("show -json waiter %d's why = %+v, want full, %d ahead, an estimated ETA", i, got.Why, i)
		}
	}
}

func TestLimit(t *testing.T) {
	f := newFixture(t)
	twoSemaphores(t, f) // 3 of jobs' 5 permits in use
	jobs := f.sem(t, "jobs", 5)

	read := func(name string, asJSON bool) string {
		return f.run(t, func(w *bytes.Buffer) error { return readLimit(f.ctx(), w, f.cli, name, asJSON) })
	}
	if out := read("jobs", false); out != "jobs: limit - (no fleet limit: each process uses its own)\n" {
		t.Errorf("limit jobs without a fleet limit:\n%s", out)
	}
	if out := read("api:github", false); out != "api:github: limit 3 (fleet)\n" {
		t.Errorf("limit api:github:\n%s", out)
	}
	var info limitInfo
	out := read("jobs", true)
	if err := json.Unmarshal([]byte(out), &info); err != nil || !reflect.DeepEqual(info, limitInfo{Name: "jobs"}) ||
		!strings.Contains(out, `"fleet_limit": null`) {
		t.Errorf("limit -json jobs (%v):\n%s", err, out)
	}

	out = f.run(t, func(w *bytes.Buffer) error { return setLimit(f.ctx(), w, f.cli, "jobs", 2, false) })
	if !strings.Contains(out, "jobs: fleet limit 2 (was -)") || !strings.Contains(out, "3 permits are in use") {
		t.Errorf("limit jobs 2:\n%s", out)
	}
	if n, fleet, err := f.effectiveLimit(jobs); err != nil || n != 2 || !fleet {
		t.Fatalf("after limit 2: EffectiveLimit = %d, %v, %v", n, fleet, err)
	}
	out = read("jobs", true)
	if err := json.Unmarshal([]byte(out), &info); err != nil || !reflect.DeepEqual(info, limitInfo{Name: "jobs", FleetLimit: ptr(2), Fleet: true}) {
		t.Errorf("limit -json jobs after setting 2 (%v):\n%s", err, out)
	}
	// The application's semaphore (limit 5) obeys it, and nobody was evicted.
	if _, err := jobs.TryAcquire(f.ctx()); !errors.Is(err, limiter.ErrBusy) {
		t.Errorf("TryAcquire under fleet limit 2 with 3 in use: %v, want ErrBusy", err)
	}
	if hs, err := inspect.New(f.holder).Holders(f.ctx(), "jobs"); err != nil || len(hs) != 2 {
		t.Errorf("holders after lowering the limit: %v, %v", hs, err)
	}

	out = f.run(t, func(w *bytes.Buffer) error { return setLimit(f.ctx(), w, f.cli, "jobs", 4, true) })
	var r setLimitResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("limit -json: %v\n%s", err, out)
	}
	want := setLimitResult{limitInfo: limitInfo{Name: "jobs", FleetLimit: ptr(4), Fleet: true}, Previous: ptr(2), InUse: 3}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("limit -json jobs 4:\n%s", out)
	}

	out = f.run(t, func(w *bytes.Buffer) error { return setLimit(f.ctx(), w, f.cli, "jobs", 0, false) })
	if !strings.Contains(out, "fleet limit cleared (was 4)") {
		t.Errorf("limit jobs 0:\n%s", out)
	}
	if n, fleet, err := f.effectiveLimit(jobs); err != nil || n != 5 || fleet {
		t.Errorf("after limit 0: EffectiveLimit = %d, %v, %v; want the constructor's 5", n, fleet, err)
	}
	if out := read("jobs", false); !strings.HasPrefix(out, "jobs: limit - ") {
		t.Errorf("limit jobs after clearing:\n%s", out)
	}

	err := setLimit(f.ctx(), &bytes.Buffer{}, f.cli, "jobs", 1<<41, false)
	if !errors.Is(err, limiter.ErrInvalidArgument) {
		t.Errorf("limit above 2^40: %v, want an invalid argument (exit 2)", err)
	}
}

func TestRelease(t *testing.T) {
	f := newFixture(t)
	// A short TTL, so the holder's next refresh comes soon.
	jobs := f.sem(t, "jobs", 3, limiter.TTL(600*time.Millisecond), limiter.Logger(slog.New(slog.DiscardHandler)))
	a := f.hold(t, jobs, "a", 2)
	b := f.hold(t, jobs, "b", 1)

	// Another process waits for the full semaphore.
	other := redistest.Limiter(t, f.srv.Client(t), limiter.Prefix(testPrefix))
	waiting, err := other.Semaphore("jobs", 3, limiter.AcquireTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan error, 1)
	go func() {
		l, err := waiting.Acquire(f.ctx(), limiter.Weight(2))
		if err == nil {
			err = l.Release(f.ctx())
		}
		granted <- err
	}()
	select {
	case err := <-granted:
		t.Fatalf("waiter got through a full semaphore: %v", err)
	case <-time.After(300 * time.Millisecond):
	}

	out := f.run(t, func(w *bytes.Buffer) error { return release(f.ctx(), w, f.cli, "jobs", "a", false) })
	want := "jobs: released lease a (weight 2, token " + strconv.FormatInt(a.Token(), 10) + ","
	if !strings.HasPrefix(out, want) || !strings.Contains(out, "next refresh") {
		t.Errorf("release jobs a:\n%s\nwant it to start %q", out, want)
	}
	hs, err := inspect.New(f.holder).Holders(f.ctx(), "jobs")
	ids := map[string]bool{}
	for _, h := range hs {
		ids[h.ID] = true
	}
	if err != nil || ids["a"] || !ids["b"] { // and maybe the waiter
		t.Errorf("holders after release a: %+v, %v; want b and not a", hs, err)
	}
	select { // the permits went to the waiter at once, not at a's TTL
	case err := <-granted:
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Error("the waiter was not granted the released permits")
	}
	select { // and the holder learns at its next refresh
	case <-a.Context().Done():
		if !errors.Is(a.Err(), limiter.ErrLeaseLost) {
			t.Errorf("released holder's Err = %v, want ErrLeaseLost", a.Err())
		}
	case <-time.After(2 * time.Second):
		t.Error("the holder of the released lease was never told")
	}

	err = release(f.ctx(), &bytes.Buffer{}, f.cli, "jobs", "nosuch", false)
	if err == nil || !strings.Contains(err.Error(), `no lease with id "nosuch" (`) || !strings.Contains(err.Error(), "holders: see redsem show jobs)") {
		t.Errorf("release of an unknown id: %v", err)
	}

	out = f.run(t, func(w *bytes.Buffer) error { return release(f.ctx(), w, f.cli, "jobs", "b", true) })
	var r releaseResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("release -json: %v\n%s", err, out)
	}
	if r.Name != "jobs" || r.Released.ID != "b" || r.Released.Weight != 1 || r.Released.Token != b.Token() {
		t.Errorf("release -json jobs b:\n%s", out)
	}
	if hs, err := inspect.New(f.holder).Holders(f.ctx(), "jobs"); err != nil || len(hs) != 0 {
		t.Errorf("holders after release b: %+v, %v", hs, err)
	}
}

// Clearing a fleet limit wakes at once the waiters that fit under their
// own process's limit: redsem's made-up limit must not hold them back.
func TestLimitClearWakesWaiters(t *testing.T) {
	f := newFixture(t)
	jobs := f.sem(t, "jobs", 3, limiter.AcquireTimeout(0))
	if err := inspect.New(f.holder).SetLimit(f.ctx(), "jobs", 1); err != nil {
		t.Fatal(err)
	}
	f.hold(t, jobs, "a", 1)
	granted := make(chan *limiter.Lease, 1)
	go func() {
		if l, err := jobs.Acquire(f.ctx()); err == nil {
			granted <- l
		}
	}()
	redistest.Eventually(t, 5*time.Second, "a waiter in the queue", func() bool {
		ws, err := inspect.New(f.holder).Waiters(f.ctx(), "jobs")
		return err == nil && len(ws) == 1
	})
	f.run(t, func(w *bytes.Buffer) error { return setLimit(f.ctx(), w, f.cli, "jobs", 0, false) })
	select {
	case l := <-granted:
		l.Release(f.ctx())
	case <-time.After(500 * time.Millisecond):
		t.Fatal("the waiter was not granted within 500ms of the fleet limit being cleared")
	}
}

// why says, for a waiter and for a request made now, the reason, what is
// ahead and when; -json the same fields.
func TestWhy(t *testing.T) {
	f := newFixture(t)
	_, ws := queued(t, f)

	out := f.run(t, func(w *bytes.Buffer) error { return why(f.ctx(), w, f.cli, "queued", ws[1].ID, false) })
	want := "queued: " + ws[1].ID + " waits: full: 1 waiter(s) (2 permit(s)) ahead, 3 of 3 in use; granted in ~"
	if !strings.HasPrefix(out, want) || !strings.HasSuffix(out, " (estimated from the holders' ages)\n") {
		t.Fatalf("why queued %s:\n%s\nwant it to start %q", ws[1].ID, out, want)
	}
	out = f.run(t, func(w *bytes.Buffer) error { return why(f.ctx(), w, f.cli, "queued", "", true) })
	var r whyResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("why -json is not JSON: %v\n%s", err, out)
	}
	if r.Name != "queued" || r.ID != "" || r.Reason != "full" || r.Ahead != 3 || r.AheadPermits != 6 || r.InUse != 3 || r.Limit != 3 || r.ETAms == nil || !r.Estimated {
		t.Fatalf("why -json queued (a request made now): %+v\n%s", r, out)
	}
	if _, err := inspect.New(f.cli).Pause(f.ctx(), "queued", time.Minute); err != nil {
		t.Fatal(err)
	}
	out = f.run(t, func(w *bytes.Buffer) error { return why(f.ctx(), w, f.cli, "queued", ws[0].ID, false) })
	if !strings.Contains(out, " waits: paused: the name is paused (redsem pause); granted in ") || strings.Contains(out, "~") {
		t.Fatalf("why of a paused waiter:\n%s", out)
	}
	var ae *limiter.ArgumentError
	if err := why(f.ctx(), &bytes.Buffer{}, f.cli, "queued", "nobody", false); !errors.As(err, &ae) {
		t.Fatalf("why of an id not waiting: %v, want an ArgumentError", err)
	}
}
