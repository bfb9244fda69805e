//go:build linux

package redistest

import "syscall"

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
