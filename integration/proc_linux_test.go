package integration

import "syscall"

// workerSysProcAttr kills a worker process if the test process dies first.
func workerSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
