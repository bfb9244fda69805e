//go:build linux

package redistest

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
)

// sysProcAttr puts redis-server in its own process group, so a Ctrl-C aimed
// at `go test` does not hit it directly, and asks the kernel to SIGKILL it
// when the test binary dies, so no server outlives the tests even when the
// binary is killed before its cleanups run.
//
// Pdeathsig fires when the OS thread that forked the child exits; the Go
// runtime only retires threads whose goroutine exited while locked with
// runtime.LockOSThread, which this package never does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// stopped reports whether every thread of process pid has stopped (state
// T in /proc): SIGSTOP is only queued when kill returns, and a thread
// running on another CPU goes on until it next enters the kernel.
func stopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// "pid (comm) S ...": comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) || (stat[i+2] != 'T' && stat[i+2] != 't') {
			return false
		}
	}
	return true
}
