//go:build !linux

package pgcluster

import "syscall"

// serverSysProcAttr puts postgres in its own process group, so a Ctrl-C at the
// terminal reaches only the parent, which then stops the server cleanly.
func serverSysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true}
}
