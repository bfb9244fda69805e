package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	binDir    string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildBinary builds redsem once per test run, into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		if binDir, buildErr = os.MkdirTemp("", "redsem-test"); buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "redsem")
		out, err := exec.Command(goBin, "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

type result struct {
	code           int
	stdout, stderr string
}

// runBinary runs bin with args and only the given Redis variables set.
func runBinary(t *testing.T, bin string, vars []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDIS_URL=") && !strings.HasPrefix(kv, "REDIS_PASSWORD=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, vars...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run %q: %v", args, err)
	}
	return result{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestBinary(t *testing.T) {
	bin := buildBinary(t)
	f := newFixture(t)
	f.hold(t, f.sem(t, "jobs", 5), "a", 2)
	full := f.sem(t, "full", 1, limiter.AcquireTimeout(0))
	f.hold(t, full, "f", 1)
	ws := f.queue(t, full, 1) // a real waiter
	addr := f.srv.Addr()

	cases := []struct {
		name   string
		vars   []string
		args   []string
		code   int
		stdout string // a substring; "" = must be empty
		stderr string // a substring; "" = must be empty
	}{
		{"no command", nil, nil, 2, "", "usage:"},
		{"help", nil, []string{"-h"}, 0, "redsem [flags] release NAME ID", ""},
		{"unknown command", nil, []string{"frob"}, 2, "", `unknown command "frob"`},
		{"bad flag", nil, []string{"-frob", "ls"}, 2, "", "-frob"},
		{"missing name", nil, []string{"-addr", addr, "show"}, 2, "", "usage: redsem show NAME"},
		{"bad N", nil, []string{"-addr", addr, "limit", "jobs", "many"}, 2, "", "N must be a whole number"},
		{"N too big", nil, []string{"-addr", addr, "-prefix", testPrefix, "limit", "jobs", "9999999999999"}, 2, "", "invalid n"},
		{"limit, too many arguments", nil, []string{"-addr", addr, "limit", "jobs", "1", "2"}, 2, "", "usage: redsem limit NAME [N]"},
		{"set-limit is gone", nil, []string{"-addr", addr, "set-limit", "jobs", "1"}, 2, "", `unknown command "set-limit"`},
		{"bad interval", nil, []string{"-addr", addr, "-interval", "0s", "watch", "jobs"}, 2, "", "-interval must be > 0"},
		{"addr and cluster", nil, []string{"-addr", addr, "-cluster", addr, "ls"}, 2, "", "exclude each other"},
		{"bad REDIS_URL", []string{"REDIS_URL=ftp://x"}, []string{"ls"}, 2, "", "REDIS_URL"},
		{"ls", nil, []string{"-addr", addr, "-prefix", testPrefix, "ls"}, 0, "jobs  semaphore  5      2       1        0        -          -\n", ""},
		{"ls waiters", nil, []string{"-addr", addr, "-prefix", testPrefix, "ls"}, 0, "full  semaphore  1      1       1        1        -          -\n", ""},
		{"show waiters", nil, []string{"-addr", addr, "-prefix", testPrefix, "show", "full"}, 0, "waiters:  1\n", ""},
		{"show the queue", nil, []string{"-addr", addr, "-prefix", testPrefix, "show", "full"}, 0, "QUEUE  WAIT ID", ""},
		{"show -json waiters", nil, []string{"-addr", addr, "-prefix", testPrefix, "show", "full", "-json"}, 0, `"id": "` + ws[0].ID + `"`, ""},
		{"limit, none set", nil, []string{"-addr", addr, "-prefix", testPrefix, "limit", "jobs"}, 0, "jobs: limit - (no fleet limit", ""},
		{"ls -json after the command", nil, []string{"ls", "-json", "-addr", addr, "-prefix", testPrefix}, 0, `"in_use": 2`, ""},
		{"default prefix sees nothing", nil, []string{"-addr", addr, "ls"}, 0, "no semaphores", ""},
		{"REDIS_URL", []string{"REDIS_URL=redis://" + addr + "/0"}, []string{"-prefix", testPrefix, "ls"}, 0, "jobs", ""},
		{"REDIS_URL db 1", []string{"REDIS_URL=redis://" + addr + "/1"}, []string{"-prefix", testPrefix, "ls"}, 0, "no semaphores", ""},
		{"show", nil, []string{"-addr", addr, "-prefix", testPrefix, "show", "jobs"}, 0, "in use:   2 of 5", ""},
		{"release unknown id", nil, []string{"-addr", addr, "-prefix", testPrefix, "release", "jobs", "zz"}, 1, "", `no lease with id "zz"`},
		{"unreachable", nil, []string{"-addr", closedAddr(t), "ls"}, 1, "", "cannot connect to Redis at 127.0.0.1:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runBinary(t, bin, c.vars, c.args...)
			if r.code != c.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, c.code, r.stdout, r.stderr)
			}
			check := func(what, got, want string) {
				if want == "" && got != "" || !strings.Contains(got, want) {
					t.Errorf("%s:\n%s\nwant %q", what, got, want)
				}
			}
			check("stdout", r.stdout, c.stdout)
			check("stderr", r.stderr, c.stderr)
		})
	}

	// limit sets the limit the application's semaphore obeys, and reads it
	// back, in text and JSON; 0 clears it.
	base := []string{"-addr", addr, "-prefix", testPrefix}
	limit := func(args ...string) result {
		t.Helper()
		r := runBinary(t, bin, nil, append(append(base, "limit"), args...)...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("limit %q: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
		return r
	}
	var sl setLimitResult
	r := limit("-json", "jobs", "1")
	if err := json.Unmarshal([]byte(r.stdout), &sl); err != nil || sl.FleetLimit == nil || *sl.FleetLimit != 1 || !sl.Fleet || sl.Previous != nil {
		t.Fatalf("limit -json jobs 1: %v\n%s", err, r.stdout)
	}
	if n, fleet, err := f.effectiveLimit(f.sem(t, "jobs", 5)); n != 1 || !fleet || err != nil {
		t.Errorf("after the binary's limit jobs 1: EffectiveLimit %d, %v, %v", n, fleet, err)
	}
	if r = limit("jobs"); r.stdout != "jobs: limit 1 (fleet)\n" {
		t.Errorf("limit jobs after setting 1:\n%s", r.stdout)
	}
	var info limitInfo
	r = limit("jobs", "-json")
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || info.FleetLimit == nil || *info.FleetLimit != 1 || !info.Fleet {
		t.Errorf("limit jobs -json: %v\n%s", err, r.stdout)
	}
	if r = limit("jobs", "0"); !strings.Contains(r.stdout, "jobs: fleet limit cleared (was 1)") {
		t.Errorf("limit jobs 0:\n%s", r.stdout)
	}
	if n, fleet, err := f.effectiveLimit(f.sem(t, "jobs", 5)); n != 5 || fleet || err != nil {
		t.Errorf("after the binary's limit jobs 0: EffectiveLimit %d, %v, %v", n, fleet, err)
	}
	r = limit("-json", "jobs")
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || info.FleetLimit != nil || info.Fleet {
		t.Errorf("limit -json jobs after clearing: %v\n%s", err, r.stdout)
	}
}

// TestBinaryWatch runs watch with its output piped, text and JSON, while
// a lease is released: each prints the state, then the change one poll of
// -interval later; SIGINT (text) and SIGTERM (JSON) end them with exit
// status 0 and nothing on standard error.
func TestBinaryWatch(t *testing.T) {
	bin := buildBinary(t)
	f := newFixture(t)
	a := f.hold(t, f.sem(t, "jobs", 5), "a", 2)
	type watcher struct {
		sig         os.Signal
		json        bool
		first, next string // in the first line, and in the one after the release
		cmd         *exec.Cmd
		out         *bufio.Reader
		stderr      bytes.Buffer
	}
	ws := []*watcher{
		{sig: os.Interrupt, first: " jobs limit=5 in_use=2 holders=1 [a:2] waiters=0 []", next: " jobs limit=5 in_use=0 holders=0 [] waiters=0 []"},
		{sig: syscall.SIGTERM, json: true, first: `"holders":[{"id":"a","weight":2,"token":` + strconv.FormatInt(a.Token(), 10),
			next: `"in_use":0,"holders":[],"waiters":[]}`},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, w := range ws {
		args := []string{"-addr", f.srv.Addr(), "-prefix", testPrefix, "watch", "jobs", "-interval", "50ms"}
		if w.json {
			args = append(args, "-json")
		}
		w.cmd = exec.CommandContext(ctx, bin, args...)
		w.cmd.Stderr = &w.stderr
		stdout, err := w.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		w.out = bufio.NewReader(stdout)
		if err := w.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = w.cmd.Process.Kill(); _ = w.cmd.Wait() }() // on a failure
	}
	// stamp reads a line and when watch read Redis for it.
	stamp := func(w *watcher, want string) time.Time {
		t.Helper()
		line, err := w.out.ReadString('\n')
		if err != nil || !strings.Contains(line, want) {
			t.Fatalf("watch (json %v): line %q (%v), want it to contain %q", w.json, line, err, want)
		}
		var at time.Time
		if w.json {
			var e watchEvent
			err = json.Unmarshal([]byte(line), &e)
			at = e.Time
		} else {
			at, err = time.Parse(timeLayout, strings.Fields(line)[0])
		}
		if err != nil {
			t.Fatalf("watch (json %v): line %q: %v", w.json, line, err)
		}
		return at
	}
	firsts := make([]time.Time, len(ws))
	for i, w := range ws {
		firsts[i] = stamp(w, w.first)
	}
	if err := a.Release(f.ctx()); err != nil {
		t.Fatal(err)
	}
	for i, w := range ws {
		// A poll every 50ms, not the default 500ms: the release is seen
		// by the second poll or so.
		if d := stamp(w, w.next).Sub(firsts[i]); d > 400*time.Millisecond {
			t.Errorf("watch (json %v) -interval 50ms saw the release %v after its first poll", w.json, d)
		}
		if err := w.cmd.Process.Signal(w.sig); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range ws {
		rest, _ := io.ReadAll(w.out)
		err := w.cmd.Wait()
		if err != nil || ctx.Err() != nil || w.stderr.Len() > 0 || len(rest) > 0 {
			t.Errorf("watch (json %v) after %v: %v (ctx %v), more output %q, stderr %q; want exit 0 and nothing more",
				w.json, w.sig, err, ctx.Err(), rest, w.stderr.String())
		}
	}
}

// TestBinaryAuth runs the binary against a server that wants a password
// and has an ACL user.
func TestBinaryAuth(t *testing.T) {
	bin := buildBinary(t)
	srv := redistest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "ops", "on", ">opspw", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	holder := redistest.Limiter(t, srv.Client(t, func(o *redis.Options) { o.Password = "s3cret" }), limiter.Prefix(testPrefix))
	sem, err := holder.Semaphore("guarded", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}

	base := []string{"-addr", srv.Addr(), "-prefix", testPrefix}
	for _, c := range []struct {
		name string
		vars []string
		args []string
		code int
	}{
		{"no password", nil, nil, 1},
		{"wrong password", nil, []string{"-password", "nope"}, 1},
		{"REDIS_PASSWORD", []string{"REDIS_PASSWORD=s3cret"}, nil, 0},
		{"-password", nil, []string{"-password", "s3cret"}, 0},
		{"ACL user", nil, []string{"-user", "ops", "-password", "opspw"}, 0},
		{"ACL user, default's password", nil, []string{"-user", "ops", "-password", "s3cret"}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runBinary(t, bin, c.vars, append(append(c.args, base...), "ls")...)
			if r.code != c.code {
				t.Fatalf("exit %d, want %d\n%s%s", r.code, c.code, r.stdout, r.stderr)
			}
			if c.code == 0 && !strings.Contains(r.stdout, "guarded") {
				t.Errorf("ls:\n%s", r.stdout)
			}
			if c.code == 1 && !strings.Contains(r.stderr, "cannot connect to Redis") {
				t.Errorf("stderr:\n%s", r.stderr)
			}
		})
	}
}

// TestBinaryRate runs the rate commands as operators type them: each
// one's output and exit status, its usage errors (exit 2, naming the
// argument) and -json.
func TestBinaryRate(t *testing.T) {
	bin := buildBinary(t)
	f := newFixture(t)
	base := []string{"-addr", f.srv.Addr(), "-prefix", testPrefix}
	cases := []struct {
		name   string
		args   []string
		code   int
		stdout string // a substring; "" = must be empty
		stderr string // a substring; "" = must be empty
	}{
		{"help", []string{"-h"}, 0, "redsem [flags] rate NAME [RATE [BURST]]", ""},
		{"rate, none set", []string{"rate", "api"}, 0, "api: rate - (no fleet rate: each process uses its own)\n", ""},
		{"set a rate", []string{"rate", "api", "100/1m", "20"}, 0, "api: fleet rate 100/1m0s burst 20 (was -)\n", ""},
		{"read it", []string{"rate", "api"}, 0, "api: rate 100/1m0s burst 20 (fleet)\n", ""},
		{"read it -json", []string{"rate", "api", "-json"}, 0, `"fleet_rate": {
    "events": 100,
    "per": "1m0s",
    "burst": 20
  },`, ""},
		{"pause", []string{"pause", "api", "30s"}, 0, "api: paused for 30s\n", ""},
		{"pause -json", []string{"-json", "pause", "api", "1m"}, 0, `"asked_ms": 60000`, ""},
		{"ls", []string{"ls"}, 0, "api   rate  100/1m0s burst 20  -       -        -        59.", ""},
		{"ls -json", []string{"ls", "-json"}, 0, `"kind": "rate"`, ""},
		{"show", []string{"show", "api"}, 0, "rate:        100/1m0s burst 20 (fleet)\n", ""},
		{"show -json", []string{"show", "api", "-json"}, 0, `"next_free_ms": 59`, ""}, // the pause's end
		{"clear it", []string{"rate", "api", "off"}, 0, "api: fleet rate cleared (was 100/1m0s burst 20)", ""},
		{"rate, no name", []string{"rate"}, 2, "", "usage: redsem rate NAME [RATE [BURST]]: NAME is missing"},
		{"bad rate", []string{"rate", "api", "100/fortnight"}, 2, "", "RATE must be N/PERIOD"},
		{"bad burst", []string{"rate", "api", "100/1m", "lots"}, 2, "", `BURST must be a whole number >= 1, not "lots"`},
		{"burst too big", []string{"rate", "api", "1/1m", "99999999999999"}, 2, "", "BURST 99999999999999: must be between 1 and"},
		{"pause, no duration", []string{"pause", "api"}, 2, "", "usage: redsem pause NAME DURATION: DURATION is missing"},
		{"pause 0", []string{"pause", "api", "0s"}, 2, "", `DURATION must be a duration above 0 such as 30s or 5m, not "0s"`},
		{"pause, negative", []string{"pause", "api", "--", "-5s"}, 2, "", `not "-5s"`},
		{"pause too long", []string{"pause", "api", "48h"}, 2, "", "DURATION 48h0m0s"},
		{"unpause, no name", []string{"unpause"}, 2, "", "usage: redsem unpause NAME: NAME is missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runBinary(t, bin, nil, append(append([]string{}, base...), c.args...)...)
			if r.code != c.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, c.code, r.stdout, r.stderr)
			}
			check := func(what, got, want string) {
				if want == "" && got != "" || !strings.Contains(got, want) {
					t.Errorf("%s:\n%s\nwant %q", what, got, want)
				}
			}
			check("stdout", r.stdout, c.stdout)
			check("stderr", r.stderr, c.stderr)
		})
	}
}
