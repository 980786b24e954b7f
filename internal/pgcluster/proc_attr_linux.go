package pgcluster

import "syscall"

// serverSysProcAttr puts postgres in its own process group (a Ctrl-C at the
// terminal reaches only the parent, which then stops the server cleanly) and
// asks the kernel to send it SIGINT, a fast clean shutdown, if the parent
// dies first, so a killed `weir dev` leaves no server behind.
func serverSysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGINT, Setpgid: true}
}
