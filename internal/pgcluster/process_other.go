//go:build !linux

package pgcluster

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// serverSysProcAttr puts postgres in its own process group, so a Ctrl-C at the
// terminal reaches only the parent, which then stops the server cleanly.
func serverSysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true}
}

// childPIDs lists the direct children of pid, as pgrep reports them.
func childPIDs(pid int) []int {
	out, err := exec.Command("pgrep", "-P", strconv.Itoa(pid)).Output()
	if err != nil {
		return nil
	}
	var children []int
	for _, field := range strings.Fields(string(out)) {
		if child, err := strconv.Atoi(field); err == nil {
			children = append(children, child)
		}
	}
	return children
}

// childProcess is a server process; CrashBackend needs Linux.
type childProcess struct{}

func liveChild(parent, pid int) (*childProcess, error) {
	return nil, fmt.Errorf("pgcluster: crashing a server process: %w", errors.ErrUnsupported)
}

func (p *childProcess) exists() bool { return false }

func (p *childProcess) kill() error { return errors.ErrUnsupported }
