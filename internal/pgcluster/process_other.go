//go:build !linux

package pgcluster

import (
	"errors"
	"fmt"
)

// childProcess is a server process; CrashBackend needs Linux.
type childProcess struct{}

func liveChild(parent, pid int) (*childProcess, error) {
	return nil, fmt.Errorf("pgcluster: crashing a server process: %w", errors.ErrUnsupported)
}

func (p *childProcess) exists() bool { return false }

func (p *childProcess) kill() error { return errors.ErrUnsupported }
