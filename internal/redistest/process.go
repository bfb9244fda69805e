package redistest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// startTimeout bounds how long a server may take to answer PING.
	startTimeout = 10 * time.Second
	// pollInterval keeps startup fast: redis-server is usually ready within
	// a few milliseconds.
	pollInterval = 5 * time.Millisecond
	// stopTimeout bounds the wait for a SIGKILLed process to be reaped.
	stopTimeout = 10 * time.Second
	// logName is the file in the server directory that receives the
	// server's stdout and stderr.
	logName = "redis.log"
	// clusterConfigName is Redis' default cluster-config-file.
	clusterConfigName = "nodes.conf"
)

// errAddrInUse marks a start that failed only because the port was taken
// between freePort and redis-server binding it; callers retry.
var errAddrInUse = errors.New("address already in use")

// process is one running redis-server. done is closed once Wait returned,
// so stopping never blocks on a process that is already gone.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// exited reports whether the process has been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the whole process group (redis-server and any fork child,
// e.g. from BGSAVE) and waits for it to be reaped. SIGKILL also ends a
// SIGSTOPped process, so a paused server never makes cleanup hang.
func (p *process) kill() error {
	if p.exited() {
		return nil
	}
	pid := p.cmd.Process.Pid
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.cmd.Process.Kill()
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("redistest: redis-server pid %d not reaped %v after SIGKILL", pid, stopTimeout)
	}
}

// serverArgs is the fixed command line: loopback only, no persistence, log
// to stdout (which goes to logName). extra comes last so callers can
// override any of these. A tlsOnly server gets no plain port, so nothing
// reaches it unencrypted by mistake.
func serverArgs(port int, tlsOnly bool, dir string, extra []string) []string {
	args := []string{"--port", strconv.Itoa(port)}
	if tlsOnly {
		args = []string{"--port", "0", "--tls-port", strconv.Itoa(port)}
	}
	args = append(args,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--protected-mode", "no",
		"--daemonize", "no",
		"--loglevel", "warning",
		"--logfile", "",
	)
	return append(args, extra...)
}

// launch starts redis-server on port and waits until it answers PING.
// head comes first on the command line: redis-server takes a config file
// (which a sentinel needs) only as its first argument. With conf the
// server listens on TLS only and is probed with conf, the client side of
// its certificates. It returns errAddrInUse (wrapped) when the port was
// stolen.
func launch(port int, dir string, head, extra []string, conf *tls.Config) (*process, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New(InstallHint)
	}
	logPath := filepath.Join(dir, logName)
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// An *os.File is handed to the child directly, so Wait never waits on
	// a copying goroutine.
	defer logFile.Close()
	// Only log output of this attempt matters when diagnosing it.
	logStart, _ := logFile.Seek(0, io.SeekEnd)

	args := append(append([]string(nil), head...), serverArgs(port, conf != nil, dir, extra)...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redistest: start redis-server: %w", err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()

	if err := waitReady(p, addrOf(port), conf); err != nil {
		_ = p.kill()
		tail := logTail(logPath, logStart)
		if strings.Contains(tail, "Address already in use") || errors.Is(err, errAddrInUse) {
			return nil, fmt.Errorf("%w: port %d: %v", errAddrInUse, port, err)
		}
		kind := "redis-server"
		if conf != nil {
			kind = "TLS redis-server"
		}
		return nil, fmt.Errorf("redistest: %s on port %d did not start: %v\n--- %s (tail) ---\n%s", kind, port, err, logPath, tail)
	}
	return p, nil
}

// waitReady polls PING (over TLS with conf) until it answers, the process
// exits, or startTimeout passes.
func waitReady(p *process, addr string, conf *tls.Config) error {
	deadline := time.Now().Add(startTimeout)
	var lastErr error
	for {
		if p.exited() {
			return fmt.Errorf("process exited: %v", p.cmd.ProcessState)
		}
		reply, err := command(addr, conf, 250*time.Millisecond, "PING")
		if err == nil && reply == "PONG" {
			return isOurs(p, addr, conf)
		}
		if err == nil {
			err = fmt.Errorf("unexpected PING reply %q", reply)
		}
		lastErr = err
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG within %v: %v", startTimeout, lastErr)
		}
		time.Sleep(pollInterval)
	}
}

// isOurs checks that the server answering on addr is p: between
// freePort and the launch, another test's server (another package runs
// at the same time) may have taken the port, answered the PING, and
// left p to fail with "Address already in use".
func isOurs(p *process, addr string, conf *tls.Config) error {
	info, err := command(addr, conf, time.Second, "INFO", "server")
	if err != nil {
		return err
	}
	want := "process_id:" + strconv.Itoa(p.cmd.Process.Pid) + "\r\n"
	if !strings.Contains(info, want) {
		return fmt.Errorf("%w: another server answers on %s", errAddrInUse, addr)
	}
	return nil
}

// logTail returns the last few KiB of the server log written after offset
// from, for failure messages.
func logTail(path string, from int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	const max = 4096
	if st, err := f.Stat(); err == nil && st.Size()-from > max {
		from = st.Size() - max
	}
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return "(log: " + err.Error() + ")"
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// clearData removes everything in dir except the log and the cluster config,
// so a restarted server starts empty even if a test forced a save (e.g.
// BGSAVE), while a cluster node keeps its identity and slots.
func clearData(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == logName || e.Name() == clusterConfigName {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func addrOf(port int) string {
	return "127.0.0.1:" + strconv.Itoa(port)
}
