package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// serverSysProcAttr puts postgres in its own process group (a Ctrl-C at the
// terminal reaches only the parent, which then stops the server cleanly) and
// asks the kernel to send it SIGINT, a fast clean shutdown, if the parent
// dies first, so a killed `weir dev` leaves no server behind.
func serverSysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGINT, Setpgid: true}
}

// childPIDs lists the direct children of pid, read from /proc.
func childPIDs(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var children []int
	for _, entry := range entries {
		child, err := strconv.Atoi(entry.Name())
		if err != nil {
			continue
		}
		if ppid, _, _, ok := procStat(child); ok && ppid == pid {
			children = append(children, child)
		}
	}
	return children
}

// childProcess is a process told by its pid and its start time (clock ticks
// since boot), which a reused pid does not share.
type childProcess struct {
	pid   int
	start string
}

// procStat reads pid's parent, start time and state from /proc/<pid>/stat.
func procStat(pid int) (ppid int, start string, state string, ok bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", "", false
	}
	// Fields after the parenthesised command name: state (3), ppid (4), …,
	// starttime (22).
	rest := string(stat)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	fields := strings.Fields(rest)
	if len(fields) < 20 {
		return 0, "", "", false
	}
	ppid, err = strconv.Atoi(fields[1])
	if err != nil {
		return 0, "", "", false
	}
	return ppid, fields[19], fields[0], true
}

// liveChild returns pid as a process if it is a live (not zombie) child of
// parent, else ErrNotServerProcess.
func liveChild(parent, pid int) (*childProcess, error) {
	ppid, start, state, ok := procStat(pid)
	if !ok || ppid != parent || state == "Z" {
		return nil, fmt.Errorf("%w: process %d (postgres is %d)", ErrNotServerProcess, pid, parent)
	}
	return &childProcess{pid: pid, start: start}, nil
}

// exists reports whether the process has not been reaped yet.
func (p *childProcess) exists() bool {
	_, start, _, ok := procStat(p.pid)
	return ok && start == p.start
}

// kill sends SIGKILL through a pidfd, opened and then checked to be this
// process, so that the signal cannot reach a process that took its pid.
func (p *childProcess) kill() error {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("%w: process %d exited", ErrNotServerProcess, p.pid)
	}
	if err != nil {
		return fmt.Errorf("opening a pidfd for process %d: %w", p.pid, err)
	}
	defer unix.Close(fd)
	if !p.exists() {
		return fmt.Errorf("%w: process %d exited", ErrNotServerProcess, p.pid)
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("%w: process %d exited", ErrNotServerProcess, p.pid)
		}
		return fmt.Errorf("killing process %d: %w", p.pid, err)
	}
	return nil
}
