//go:build linux

package main

import "syscall"

// sysProcAttr makes the kernel kill redis-server when this process dies,
// even when a benchmark timeout panics before Stop runs, and keeps Ctrl-C
// aimed at the terminal's process group from reaching it directly.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
