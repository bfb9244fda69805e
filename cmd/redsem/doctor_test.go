package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redsem/redsem/internal/redistest"
)

// readmeACL is the README's least-privilege user (its ACL line), under
// the prefix the doctor tests use.
const readmeACL = "on >pw ~redsem:* resetchannels &redsem:* -@all +fcall +function|load +evalsha +eval +hget +info +scan +subscribe +ping +time +hmget +hset +hdel +hincrby +zadd +zrem +zscore +zmscore +zrange +zrangebyscore +zrevrangebyscore +pexpireat +persist +publish +get +set +del +mget"

// doctorResult is one doctor run: its exit status, findings and errors.
type doctorResult struct {
	code     int
	findings []finding
	stderr   string
}

// runDoctor runs the whole command, as main does, with -json.
func runDoctor(t *testing.T, args ...string) doctorResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append([]string{"doctor", "-json", "-timeout", "5s"}, args...)
	r := doctorResult{code: run(args, &stdout, &stderr, env(nil)), stderr: stderr.String()}
	if err := json.Unmarshal(stdout.Bytes(), &r.findings); err != nil && r.code != 2 {
		t.Fatalf("doctor %q: exit %d, output not JSON: %v\n%s\n%s", args, r.code, err, stdout.String(), r.stderr)
	}
	return r
}

// find returns the finding of check on node; it fails the test when there
// is none.
func (r doctorResult) find(t *testing.T, node, check string) finding {
	t.Helper()
	for _, f := range r.findings {
		if f.Node == node && f.Check == check {
			return f
		}
	}
	t.Fatalf("no %s finding for %s in %+v", check, node, r.findings)
	return finding{}
}

// want checks a finding's status, and that its text holds each of texts.
func (r doctorResult) want(t *testing.T, node, check, status string, texts ...string) finding {
	t.Helper()
	f := r.find(t, node, check)
	if f.Status != status {
		t.Errorf("%s %s: %s (%s), want %s", node, check, f.Status, f.Found, status)
	}
	for _, s := range texts {
		if !strings.Contains(f.Found+" "+f.Advice, s) {
			t.Errorf("%s %s: %q / %q lacks %q", node, check, f.Found, f.Advice, s)
		}
	}
	if f.Status != statusOK && f.Advice == "" && check != "quarantine" {
		t.Errorf("%s %s: %s without advice", node, check, f.Status)
	}
	return f
}

func TestDoctorHealthy(t *testing.T) {
	srv := redistest.StartServer(t)
	r := runDoctor(t, "-addr", srv.Addr())
	if r.code != 0 {
		t.Fatalf("exit %d on a well-configured server: %s\n%+v", r.code, r.stderr, r.findings)
	}
	for _, f := range r.findings {
		if f.Node != srv.Addr() || (f.Status != statusOK && f.Status != statusWarn) {
			t.Errorf("finding %+v", f)
		}
	}
	a := srv.Addr()
	r.want(t, a, "eviction", statusOK, "no maxmemory")
	r.want(t, a, "persistence", statusWarn, "forgets every lease", "RestartQuarantine")
	r.want(t, a, "version", statusOK, "functions")
	r.want(t, a, "acl", statusOK, "ACL DRYRUN default")
	r.want(t, a, "replicas", statusOK, "0 connected")
	r.want(t, a, "clock", statusOK)
	r.want(t, a, "quarantine", statusWarn)
	if len(r.findings) != 7 {
		t.Errorf("%d findings, want 7: %+v", len(r.findings), r.findings)
	}
}

func TestDoctorText(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory", "10mb", "--maxmemory-policy", "volatile-lru")
	var stdout, stderr bytes.Buffer
	code := run([]string{"doctor", "-addr", srv.Addr()}, &stdout, &stderr, env(nil))
	out := stdout.String()
	if code != 1 || !strings.Contains(stderr.String(), "1 error(s)") {
		t.Errorf("exit %d, stderr %q, want 1 and the count", code, stderr.String())
	}
	ls := lines(out)
	if got := strings.Join(ls[0], " "); got != "NODE CHECK STATUS FOUND" {
		t.Errorf("header %q\n%s", got, out)
	}
	if !strings.Contains(out, srv.Addr()+"  eviction     error   maxmemory 10.00M with maxmemory-policy volatile-lru") ||
		!strings.Contains(out, "-> CONFIG SET maxmemory-policy noeviction") ||
		!strings.Contains(out, "7 checks: 4 ok, 2 warnings, 1 errors") {
		t.Errorf("text output:\n%s", out)
	}
}

func TestDoctorEviction(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru")
	r := runDoctor(t, "-addr", srv.Addr())
	if r.code != 1 {
		t.Errorf("exit %d with allkeys-lru, want 1", r.code)
	}
	r.want(t, srv.Addr(), "eviction", statusError, "allkeys-lru", "noeviction")

	if err := srv.Client(t).ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	r = runDoctor(t, "-addr", srv.Addr())
	r.want(t, srv.Addr(), "eviction", statusOK, "noeviction")
	if r.code != 0 {
		t.Errorf("exit %d with noeviction, want 0", r.code)
	}
}

func TestDoctorPersistence(t *testing.T) {
	srv := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
	r := runDoctor(t, "-addr", srv.Addr())
	r.want(t, srv.Addr(), "persistence", statusOK, "appendfsync always", "RestartQuarantine(0)")

	srv = redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "everysec")
	runDoctor(t, "-addr", srv.Addr()).want(t, srv.Addr(), "persistence", statusWarn, "appendfsync everysec", "does not see")

	srv = redistest.StartServer(t, "--save", "3600 1")
	runDoctor(t, "-addr", srv.Addr()).want(t, srv.Addr(), "persistence", statusWarn, "RDB snapshots", "does not see")
}

func TestDoctorACL(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := srv.Client(t)
	ctx := context.Background()
	setUser := func(name, rules string) {
		t.Helper()
		args := []any{"acl", "setuser", name}
		for _, r := range strings.Fields(rules) {
			args = append(args, r)
		}
		if err := admin.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	setUser("full", readmeACL)
	setUser("nofcall", strings.Replace(readmeACL, " +fcall", "", 1))
	setUser("nohget", strings.Replace(readmeACL, " +hget", "", 1))
	a := srv.Addr()
	as := func(user string) doctorResult {
		return runDoctor(t, "-addr", a, "-user", user, "-password", "pw")
	}

	// The README's user cannot run ACL DRYRUN: the script checks instead.
	r := as("full")
	r.want(t, a, "acl", statusOK, "redis.acl_check_cmd")
	r.want(t, a, "version", statusOK)
	if r.code != 0 {
		t.Errorf("README's user: exit %d: %+v", r.code, r.findings)
	}

	r = as("nofcall")
	r.want(t, a, "acl", statusWarn, "may not run: fcall (", "+fcall", "EVALSHA")
	r.want(t, a, "version", statusWarn, "refuses FCALL:")
	if r.code != 0 {
		t.Errorf("without fcall (a fallback): exit %d, want 0", r.code)
	}

	r = as("nohget")
	r.want(t, a, "acl", statusError, "may not run: hget (", "+hget")
	if r.code != 1 {
		t.Errorf("without hget: exit %d, want 1", r.code)
	}

	// A user refused PING still gets its report.
	setUser("noping", strings.Replace(readmeACL, " +ping", "", 1))
	as("noping").want(t, a, "acl", statusError, "may not run: ping (")

	// An admin checks itself by ACL DRYRUN, which also sees a refusal.
	setUser("default", "-hget")
	runDoctor(t, "-addr", a).want(t, a, "acl", statusError, "may not run: hget (ACL DRYRUN default)")
}

func TestDoctorQuarantine(t *testing.T) {
	srv := redistest.StartServer(t)
	r := runDoctor(t, "-addr", srv.Addr(), "-ttl", "1h")
	f := r.want(t, srv.Addr(), "quarantine", statusWarn, "restart quarantine (-ttl 1h0m0s)", "RestartQuarantine(0)")
	_, after, _ := strings.Cut(f.Found, "no state for until ")
	until, err := time.Parse(time.RFC3339, strings.Fields(after + " ")[0])
	if d := time.Until(until) - time.Hour; err != nil || d.Abs() > time.Minute {
		t.Errorf("resume time %q (%v), want in about an hour", f.Found, err)
	}
	if r.code != 0 {
		t.Errorf("a quarantine is no error: exit %d", r.code)
	}

	// The limiter's arithmetic: INFO's uptime may run a second ahead.
	n := &node{addr: "n", info: map[string]string{"uptime_in_seconds": "11"}}
	env := checkEnv{ttl: 10 * time.Second}
	if f := checkQuarantine(context.Background(), n, env); f.Status != statusOK {
		t.Errorf("up 11s, ttl 10s: %+v", f)
	}
	n.info["uptime_in_seconds"] = "10"
	if f := checkQuarantine(context.Background(), n, env); f.Status != statusWarn || !strings.Contains(f.Found, "(in 1s)") {
		t.Errorf("up 10s, ttl 10s: %+v", f)
	}
}

func TestDoctorReplicas(t *testing.T) {
	master := redistest.StartServer(t)
	a := master.Addr()
	r := runDoctor(t, "-addr", a, "-wait-replicas", "1")
	r.want(t, a, "replicas", statusError, "0 connected replica(s), -wait-replicas 1", "ErrNotReplicated")
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}

	host, port, _ := strings.Cut(a, ":")
	replica := redistest.StartServer(t, "--replicaof", host, port)
	redistest.Eventually(t, 10*time.Second, "the replica connected", func() bool {
		info, err := master.Client(t).Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1")
	})
	r = runDoctor(t, "-addr", a, "-wait-replicas", "1")
	r.want(t, a, "replicas", statusOK, "1 connected replica(s)")
	if r.code != 0 {
		t.Errorf("exit %d with the replica, want 0: %+v", r.code, r.findings)
	}
	runDoctor(t, "-addr", a).want(t, a, "replicas", statusWarn, "failover can lose", "WaitReplicas")
	runDoctor(t, "-addr", replica.Addr()).want(t, replica.Addr(), "replicas", statusError, "role slave")
}

func TestDoctorCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	r := runDoctor(t, "-cluster", strings.Join(c.Addrs(), ","))
	if r.code != 0 {
		t.Errorf("exit %d on a healthy Cluster: %s\n%+v", r.code, r.stderr, r.findings)
	}
	for _, a := range c.Addrs() {
		r.want(t, a, "cluster-slots", statusOK, "cluster_state ok, 16384 of 16384 slots served")
		r.want(t, a, "acl", statusOK)
		r.want(t, a, "replicas", statusOK)
	}
	if len(r.findings) != 3*8 {
		t.Errorf("%d findings, want 8 on each of 3 masters", len(r.findings))
	}

	// A master that stops serving its slots breaks them for every node.
	ctx := context.Background()
	first := c.Servers()[0].Client(t)
	if err := first.Do(ctx, "cluster", "delslotsrange", "0", "99").Err(); err != nil {
		t.Fatal(err)
	}
	r = runDoctor(t, "-cluster", strings.Join(c.Addrs(), ","))
	r.want(t, c.Addrs()[0], "cluster-slots", statusError, "redis-cli --cluster check")
	if r.code != 1 {
		t.Errorf("exit %d with slots unserved, want 1", r.code)
	}
}

func TestDoctorRedlock(t *testing.T) {
	nodes := redistest.StartNodes(t, 2)
	down := closedAddr(t)
	r := runDoctor(t, "-redlock", nodes[0].Addr()+","+nodes[1].Addr()+","+down)
	r.want(t, down, "connect", statusError, "does not answer")
	r.want(t, "all", "clock-skew", statusOK, "between the nodes")
	for _, n := range nodes {
		r.want(t, n.Addr(), "clock", statusOK)
		for _, f := range r.findings {
			if f.Node == n.Addr() && (f.Check == "replicas" || f.Check == "cluster-slots") {
				t.Errorf("a Redlock node is not checked for %s", f.Check)
			}
		}
	}
	if r.code != 1 {
		t.Errorf("exit %d with a node down, want 1", r.code)
	}
}

func TestDoctorSkew(t *testing.T) {
	at := func(addr string, ahead time.Duration) *node {
		return &node{addr: addr, offset: offset{ahead: ahead}}
	}
	for _, c := range []struct {
		a, b time.Duration
		want string
	}{
		{0, 50 * time.Millisecond, statusOK},
		{-60 * time.Millisecond, 60 * time.Millisecond, statusWarn},
		{time.Second, -time.Millisecond, statusError},
	} {
		f := checkSkewBetween([]*node{at("a", c.a), at("b", c.b)})
		if f.Status != c.want {
			t.Errorf("offsets %v and %v: %+v, want %s", c.a, c.b, f, c.want)
		}
	}
	if f := checkSkewBetween([]*node{at("a", 0)}); f.Status != statusWarn {
		t.Errorf("one node: %+v", f)
	}
}

func TestDoctorUsage(t *testing.T) {
	for _, args := range [][]string{
		{"doctor", "x"}, {"doctor", "-wait-replicas", "-1"}, {"doctor", "-ttl", "0s"},
		{"doctor", "-redlock", "a:1,b:2", "-addr", "c:3"}, {"doctor", "-redlock", "a:1", "-cluster", "b:2"},
		{"doctor", "-redlock", "a:1", "-wait-replicas", "1"}, {"doctor", "-redlock", ","},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr, env(nil)); code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage): %s", args, code, stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"doctor", "-addr", closedAddr(t)}, &stdout, &stderr, env(nil)); code != 1 || !strings.Contains(stderr.String(), "cannot connect") {
		t.Errorf("unreachable: exit %d, %q", code, stderr.String())
	}
}
