package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
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
		{"bad N", nil, []string{"-addr", addr, "set-limit", "jobs", "many"}, 2, "", "N must be a whole number"},
		{"N too big", nil, []string{"-addr", addr, "-prefix", testPrefix, "set-limit", "jobs", "9999999999999"}, 2, "", "invalid n"},
		{"addr and cluster", nil, []string{"-addr", addr, "-cluster", addr, "ls"}, 2, "", "exclude each other"},
		{"bad REDIS_URL", []string{"REDIS_URL=ftp://x"}, []string{"ls"}, 2, "", "REDIS_URL"},
		{"ls", nil, []string{"-addr", addr, "-prefix", testPrefix, "ls"}, 0, "jobs  -      2       1", ""},
		{"ls -json after the command", nil, []string{"ls", "-json", "-addr", addr, "-prefix", testPrefix}, 0, `"in_use": 2`, ""},
		{"default prefix sees nothing", nil, []string{"-addr", addr, "ls"}, 0, "no semaphores", ""},
		{"REDIS_URL", []string{"REDIS_URL=redis://" + addr + "/0"}, []string{"-prefix", testPrefix, "ls"}, 0, "jobs", ""},
		{"REDIS_URL db 1", []string{"REDIS_URL=redis://" + addr + "/1"}, []string{"-prefix", testPrefix, "ls"}, 0, "no semaphores", ""},
		{"show", nil, []string{"-addr", addr, "-prefix", testPrefix, "show", "jobs"}, 0, "in use:   2", ""},
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

	// The JSON is valid, and set-limit reaches the application's semaphore.
	r := runBinary(t, bin, nil, "-addr", addr, "-prefix", testPrefix, "-json", "set-limit", "jobs", "1")
	var sl setLimitResult
	if err := json.Unmarshal([]byte(r.stdout), &sl); r.code != 0 || err != nil || sl.FleetLimit == nil || *sl.FleetLimit != 1 {
		t.Fatalf("set-limit -json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if n, fleet, err := f.sem(t, "jobs", 5).EffectiveLimit(f.ctx()); n != 1 || !fleet || err != nil {
		t.Errorf("after the binary's set-limit 1: EffectiveLimit %d, %v, %v", n, fleet, err)
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
