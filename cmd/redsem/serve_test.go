package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// serve runs the dashboard on the Redis the connection flags name, with
// its password nowhere on the pages, until SIGTERM ends it with 0.
func TestServeBinary(t *testing.T) {
	bin := buildBinary(t)
	const password = "pw-s3cret-dash"
	srv := redistest.StartServer(t)
	if err := srv.Client(t).ConfigSet(t.Context(), "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	app := redistest.Limiter(t, srv.Client(t, func(o *redis.Options) { o.Password = password }), limiter.Prefix(testPrefix))
	s, err := app.Semaphore("team {a} jobs", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(t.Context(), limiter.ID("worker-1")); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "serve", "-listen", "127.0.0.1:0", "-prefix", testPrefix, "-interval", "100ms")
	cmd.Env = append(os.Environ(), "REDIS_URL=redis://:"+password+"@"+srv.Addr())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	first, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("serve said nothing: %v; stderr: %s", err, stderr.String())
	}
	base := strings.Fields(first[strings.Index(first, "http://"):])[0]
	if !strings.HasPrefix(base, "http://127.0.0.1:") || strings.Contains(first, password) {
		t.Fatalf("serve's first line: %q", first)
	}
	get := func(path string) string {
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	var page string
	redistest.Eventually(t, 5*time.Second, "the held name on the overview", func() bool {
		page = get("")
		return strings.Contains(page, "team {a} jobs")
	})
	name := get("name?name=" + url.QueryEscape("team {a} jobs"))
	for _, p := range []string{page, name, get("api/overview"), get("metrics")} {
		if strings.Contains(p, password) {
			t.Fatalf("a page shows the Redis password:\n%s", p)
		}
	}
	if !strings.Contains(name, "worker-1") || !strings.Contains(page, srv.Addr()) || strings.Contains(name, `class="action`) {
		t.Errorf("name page without its holder, or overview without the address, or with controls:\n%s\n%s", page, name)
	}
	for host, want := range map[string]int{"attacker.example": 421, "attacker.example:80": 421, "localhost": 200, "[::1]:7380": 200} {
		req, _ := http.NewRequest(http.MethodGet, base+"api/overview", nil)
		req.Host = host // DNS rebinding: another name that points at loopback
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, res.StatusCode, want)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v; stderr: %s", err, stderr.String())
	}
}

// -actions needs a token, and a token needs -actions: usage errors, before
// anything is sent.
func TestServeUsage(t *testing.T) {
	env := func(token string) func(string) string {
		return func(k string) string {
			if k == tokenEnv {
				return token
			}
			return ""
		}
	}
	addr := closedAddr(t)
	for _, c := range []struct {
		args  []string
		token string
		want  string
	}{
		{[]string{"serve", "-actions"}, "", "needs a token"},
		{[]string{"serve", "-token", "0123456789"}, "", "only for -actions"},
		{[]string{"serve", "-actions", "-token", "short"}, "", "-token"},
		{[]string{"serve", "-actions"}, "short", "-token (or $REDSEM_TOKEN)"},
		{[]string{"serve", "-interval", "3h"}, "", "-interval 3h0m0s"},
		{[]string{"serve", "-interval", "10ms"}, "", "-interval 10ms"},
	} {
		var out, errOut bytes.Buffer
		code := run(append(c.args, "-addr", addr), &out, &errOut, env(c.token))
		if code != 2 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%q (token %q): exit %d, %q; want 2 and %q", c.args, c.token, code, errOut.String(), c.want)
		}
	}
}
