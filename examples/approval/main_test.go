package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestApproval(t *testing.T) {
	t.Parallel()

	t.Run("Approve", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		var out bytes.Buffer
		require.NoError(t, run(ctx, dbtest.Pool(ctx, t), dbtest.TestSchema(ctx, t), &out, "r-1", "approve", time.Hour))
		require.Equal(t, `request r-1: waiting up to 1h0m0s for a decision
query: pending
signal: approve by bob
notified alice: approved
result: approved by bob
query after close: approved
`, out.String())
	})

	t.Run("Reject", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		var out bytes.Buffer
		require.NoError(t, run(ctx, dbtest.Pool(ctx, t), dbtest.TestSchema(ctx, t), &out, "r-2", "reject", time.Hour))
		require.Equal(t, `request r-2: waiting up to 1h0m0s for a decision
query: pending
signal: reject by bob
notified alice: rejected
result: rejected by bob
query after close: rejected
`, out.String())
	})

	t.Run("DeadlinePasses", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		var out bytes.Buffer
		require.NoError(t, run(ctx, dbtest.Pool(ctx, t), dbtest.TestSchema(ctx, t), &out, "r-3", "none", 2*time.Second))
		// The first query races the 2s timer on a slow machine, so only what
		// follows it is checked exactly.
		require.True(t, strings.HasPrefix(out.String(), "request r-3: waiting up to 2s for a decision\nquery: "), out.String())
		require.True(t, strings.HasSuffix(out.String(), `
notified alice: expired
result: expired
query after close: expired
`), out.String())
	})
}

// Each run of the example asks for an approval of its own, never weir dev's
// approval-r-1 nor an earlier run's.
func TestNewRequestIDsDiffer(t *testing.T) {
	t.Parallel()
	first := newRequestID()
	require.NotEqual(t, first, newRequestID())
	require.NotEqual(t, "r-1", first)
}
