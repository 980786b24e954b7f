package main

import (
	"bytes"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestCLIPaperCuts(t *testing.T) {
	t.Parallel()
	weir, _ := setupCLI(t)

	t.Run("UnknownSubcommand", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{{"bogus"}, {"workflow", "bogus"}, {"schedule", "bogus"}, {"migrate", "bogus"}} {
			out := weir(t, cliReaderSecret, args...)
			require.Equal(t, exitUsage, out.code, "%v: %s", args, out.stderr)
			require.Contains(t, out.stderr, `unknown command "bogus"`)
		}
		out := weir(t, cliReaderSecret, "workflow")
		require.Equal(t, 0, out.code, "a group alone prints its help")
		require.Contains(t, out.stdout, "Available Commands")
	})

	t.Run("DatabaseFlagsOnlyWhereUsed", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{{"workflow", "--help"}, {"workflow", "describe", "--help"}, {"schedule", "list", "--help"}} {
			out := weir(t, "", args...)
			require.Equal(t, 0, out.code)
			require.NotContains(t, out.stdout, "--database-url", "%v", args)
			require.NotContains(t, out.stdout, "--schema", "%v", args)
		}
		for _, args := range [][]string{{"migrate", "up", "--help"}, {"server", "--help"}} {
			out := weir(t, "", args...)
			require.Contains(t, out.stdout, "--database-url", "%v", args)
		}
	})

	t.Run("DescribeShowsInputAndResult", func(t *testing.T) {
		t.Parallel()
		workflowID := "cli-io-" + uuid.NewString()
		out := weir(t, cliWriterSecret, "workflow", "start", "echo", "--workflow-id", workflowID, "--args", `{"msg": "hi"}`, "--wait")
		require.Equal(t, 0, out.code, out.stderr)
		out = weir(t, cliReaderSecret, "workflow", "describe", workflowID)
		require.Equal(t, 0, out.code, out.stderr)
		require.Regexp(t, `Input:\s+\{"msg":"hi"\}`, out.stdout)
		require.Regexp(t, `Result:\s+\{"msg":"hi"\}`, out.stdout)
	})

	t.Run("NoWorkerIsSaid", func(t *testing.T) {
		t.Parallel()
		workflowID := "cli-unserved-" + uuid.NewString()
		out := weir(t, cliWriterSecret, "workflow", "start", "echo", "--workflow-id", workflowID, "--queue", "nobody-polls",
			"--wait", "--wait-timeout", "300ms")
		require.Equal(t, exitStillRunning, out.code, out.stderr)
		require.Contains(t, out.stderr, `weir: warning: No live worker serves queue "nobody-polls"`)
		require.Equal(t, 1, bytes.Count([]byte(out.stderr), []byte("warning")), "said once: %s", out.stderr)

		out = weir(t, cliReaderSecret, "workflow", "result", workflowID, "--wait", "200ms")
		require.Equal(t, exitStillRunning, out.code)
		require.Contains(t, out.stderr, "No live worker serves queue")

		out = weir(t, cliReaderSecret, "workflow", "describe", workflowID)
		require.Equal(t, 0, out.code, out.stderr)
		require.Regexp(t, `Problem:\s+No live worker serves queue "nobody-polls"`, out.stdout)

		out = weir(t, cliWriterSecret, "workflow", "start", "unregistered_kind", "--workflow-id", workflowID+"-kind", "--wait", "--wait-timeout", "200ms")
		require.Equal(t, exitStillRunning, out.code, out.stderr)
		require.Contains(t, out.stderr, "none registers workflow unregistered_kind")
	})
}
