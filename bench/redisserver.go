package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The bench module cannot import the main module's internal/redistest, so
// this is its own minimal copy: one throwaway redis-server on a free
// loopback port, no persistence.

const installHint = "redis-server not found: install it (apt-get install -y redis-server) or set REDIS_ADDR"

// redisServer is either a redis-server this process started (cmd != nil)
// or an external one named by REDIS_ADDR.
type redisServer struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

// startRedis uses REDIS_ADDR when set, and otherwise starts
// /usr/bin/redis-server (or the one on PATH) with --save "" --appendonly no.
func startRedis() (*redisServer, error) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return &redisServer{Addr: addr}, nil
	}
	bin := "/usr/bin/redis-server"
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, errors.New(installHint)
		}
	}
	var lastErr error
	for range 5 { // the free port may be taken before redis binds it
		s, err := launchRedis(bin)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if !strings.Contains(err.Error(), "Address already in use") {
			break
		}
	}
	return nil, lastErr
}

func launchRedis(bin string) (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return launchRedisPort(bin, port)
}

// freePort is a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port, nil
}

// redisBin is /usr/bin/redis-server, or the one on PATH.
func redisBin() (string, error) {
	bin := "/usr/bin/redis-server"
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return "", errors.New(installHint)
		}
	}
	return bin, nil
}

// launchRedisPort starts redis-server on port (no persistence) and waits
// for its PONG.
func launchRedisPort(bin string, port int) (*redisServer, error) {
	dir, err := os.MkdirTemp("", "redsem-bench-")
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "redis.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--daemonize", "no", "--protected-mode", "no",
		"--loglevel", "warning", "--logfile", "")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &redisServer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()

	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-s.done:
			log, _ := os.ReadFile(logPath)
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("redis-server on port %d exited: %s", port, log)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("redis-server on port %d: no PONG within 10s: %v", port, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Stop kills a server this process started; an external one is left alone.
func (s *redisServer) Stop() {
	if s == nil || s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
	}
	_ = os.RemoveAll(s.dir)
}
