package dashboard_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redsem/redsem/internal/redistest"
	"github.com/redsem/redsem/limiter"
)

// holderTTL is the child's lease TTL: refreshed every second, so that it
// learns of a forced release within about a second.
const holderTTL = 3 * time.Second

// runHolder is the child process "holder": it holds a lease of
// $HOLDER_NAME with id $HOLDER_ID in the Redis at $HOLDER_ADDR, says
// "held TOKEN", and then "lost: CAUSE" when the lease is lost. It
// releases the lease and exits when its standard input closes.
func runHolder() int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("HOLDER_ADDR")})
	defer rdb.Close()
	c, err := limiter.New(rdb, limiter.Prefix(testPrefix), limiter.RestartQuarantine(0), limiter.TTL(holderTTL))
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer c.Close(context.Background())
	s, err := c.Semaphore(os.Getenv("HOLDER_NAME"), 2)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	l, err := s.TryAcquire(context.Background(), limiter.ID(os.Getenv("HOLDER_ID")))
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("held", l.Token())
	stdin := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stdin) }()
	select {
	case <-l.Context().Done():
		fmt.Println("lost:", context.Cause(l.Context()))
	case <-stdin:
		_ = l.Release(context.Background())
	}
	return 0
}

// holderProcess is a running holder child: its output, line by line.
type holderProcess struct {
	lines chan string
	stop  func() // closes its input, so that it releases and exits
}

// startHolder starts a holder child of name with that id and waits until
// it holds the lease. It ends with the test.
func startHolder(t *testing.T, addr, name, id string) *holderProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), redistest.ChildEnv+"=holder", "HOLDER_ADDR="+addr, "HOLDER_NAME="+name, "HOLDER_ID="+id)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &holderProcess{lines: make(chan string, 16)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Errorf("holder child: %v", err)
			}
		})
	}
	t.Cleanup(p.stop)
	if line, err := p.next(10 * time.Second); err != nil || !strings.HasPrefix(line, "held ") {
		t.Fatalf("holder child: %q, %v", line, err)
	}
	return p
}

// next is the child's next line, within d.
func (p *holderProcess) next(d time.Duration) (string, error) {
	select {
	case line, ok := <-p.lines:
		if !ok {
			return "", errors.New("the child's output ended")
		}
		return line, nil
	case <-time.After(d):
		return "", fmt.Errorf("no line within %v", d)
	}
}
