package cputime_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/cputime"
)

// TestProcess: the process's CPU time grows while it computes.
func TestProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	before := cputime.Process()
	deadline := time.Now().Add(200 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	require.Positive(t, x)
	require.Greater(t, cputime.Process()-before, time.Duration(0))
}
