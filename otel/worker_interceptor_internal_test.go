package otel

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// The recovering attempt's weir.lease_expired event is found by the text the
// fencing reaper records; this catches the text drifting.
func TestReapedErrorPrefixMatchesTheReaper(t *testing.T) {
	t.Parallel()
	source, err := os.ReadFile("../fencing/lease_reaper.go")
	require.NoError(t, err)
	require.Contains(t, string(source), "format('"+reapedErrorPrefix+" %s expired")
}

func TestTaskNamespace(t *testing.T) {
	t.Parallel()
	namespace, ok := taskNamespace("weir.workflow:billing/order")
	require.True(t, ok)
	require.Equal(t, "billing", namespace)
	_, ok = taskNamespace("charge")
	require.False(t, ok)
}
