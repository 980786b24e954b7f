//go:build !linux

package pgcluster

import (
	"os/exec"
	"strconv"
	"strings"
)

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
