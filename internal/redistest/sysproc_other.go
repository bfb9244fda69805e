//go:build unix && !linux

package redistest

import "syscall"

// sysProcAttr puts redis-server in its own process group so a Ctrl-C aimed
// at `go test` does not hit it directly. Pdeathsig is Linux-only; elsewhere
// servers rely on the t.Cleanup kill.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// stopped cannot tell here: Freeze then trusts the signal.
func stopped(int) bool { return true }
