package redistest

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redsem/redsem/limiter"
)

// StartMain starts a server for a TestMain, before any testing.TB exists
// (runnable Examples need one). Call stop after m.Run. A missing
// redis-server is an error carrying InstallHint, for TestMain to fail on.
func StartMain() (addr string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "redistest-main-")
	if err != nil {
		return "", nil, err
	}
	for attempt := 0; attempt < startAttempts; attempt++ {
		port, perr := freePort(false)
		if perr != nil {
			err = perr
			break
		}
		p, lerr := launch(port, dir, nil, nil, nil)
		if errors.Is(lerr, errAddrInUse) {
			err = lerr
			continue
		}
		if lerr != nil {
			err = lerr
			break
		}
		return addrOf(port), func() {
			_ = p.kill()
			_ = os.RemoveAll(dir)
		}, nil
	}
	_ = os.RemoveAll(dir)
	return "", nil, fmt.Errorf("redistest: %w", err)
}

// ChildEnv names the environment variable that turns a test binary into
// one of its package's child processes (see Main).
const ChildEnv = "REDSEM_CHILD"

// Main is the TestMain of a package whose tests re-run the test binary as
// child processes and whose runnable Examples need a server. When ChildEnv
// names one of children, it runs that child and exits with its code.
// Otherwise it starts a redis-server, exports its address as REDIS_ADDR,
// runs the tests, stops the server and exits with the tests' code.
func Main(m *testing.M, children map[string]func() int) {
	Children(children)
	addr, stop, err := StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("REDIS_ADDR", addr)
	if examplesWillRun() {
		// The Examples show limiter.New as users write it, with the
		// restart quarantine on: a server younger than the TTL (and a
		// second, INFO's resolution) grants nothing new, so they get one
		// old enough for TTLs up to the default.
		time.Sleep(limiter.DefaultTTL + 2*time.Second)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

// examplesWillRun reports whether -test.run lets the runnable Examples run.
func examplesWillRun() bool {
	flag.Parse()
	f := flag.Lookup("test.run")
	if f == nil || f.Value.String() == "" {
		return true
	}
	pattern := f.Value.String()
	re, err := regexp.Compile(pattern)
	return strings.Contains(pattern, "Example") || (err == nil && re.MatchString("Example"))
}

// Children is the part of a TestMain that turns the test binary into one
// of its package's child processes: when ChildEnv names one of children,
// it runs that child and exits with its code; otherwise it returns.
func Children(children map[string]func() int) {
	role := os.Getenv(ChildEnv)
	if role == "" {
		return
	}
	child, ok := children[role]
	if !ok {
		fmt.Fprintf(os.Stderr, "redistest: no child %q\n", role)
		os.Exit(2)
	}
	os.Exit(child())
}
