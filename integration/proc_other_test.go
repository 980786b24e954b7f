//go:build !linux

package integration

import "syscall"

// workerSysProcAttr: workers also stop when their stdin (a pipe from the
// test process) closes.
func workerSysProcAttr() *syscall.SysProcAttr { return nil }
