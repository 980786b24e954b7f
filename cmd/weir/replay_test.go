package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// changedEchoWorkflow is echoWorkflow after a non-deterministic change: it
// now sleeps before answering.
type changedEchoWorkflow struct {
	workflow.Defaults[echoArgs, echoArgs]
}

func (w *changedEchoWorkflow) Run(ctx workflow.Context, args echoArgs) (echoArgs, error) {
	if err := workflow.Sleep(ctx, time.Second); err != nil {
		return args, err
	}
	return args, nil
}

// replayerMain runs the test binary as a replayer program with today's
// echoWorkflow ("same") or a changed one ("changed"), or none ("empty").
func replayerMain(mode string) {
	r, err := worker.NewReplayer(nil)
	if err != nil {
		panic(err)
	}
	switch mode {
	case "same":
		worker.AddReplayerWorkflow(r, &echoWorkflow{})
	case "changed":
		worker.AddReplayerWorkflow(r, &changedEchoWorkflow{})
	}
	r.Main()
}

// replayerScript writes a program that runs this test binary as a replayer.
func replayerScript(t *testing.T, mode string) string {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "replayer-"+mode)
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\nWEIR_TEST_REPLAYER="+mode+" exec '"+self+"' \"$@\"\n"), 0o700)) //nolint:gosec // a test program
	return path
}

func TestWorkflowReplayCommand(t *testing.T) {
	t.Parallel()

	weir, _ := setupCLI(t)
	id := "cli-replay-" + uuid.NewString()
	out := weir(t, cliWriterSecret, "workflow", "start", "echo", "--workflow-id", id, "--args", `{"msg":"hi"}`, "--wait")
	require.Equal(t, 0, out.code, out.stderr)

	// From the server.
	out = weir(t, cliReaderSecret, "workflow", "replay", id, "--replayer", replayerScript(t, "same"))
	require.Equal(t, 0, out.code, out.stderr)
	require.Contains(t, out.stdout, "ok: workflow "+id)
	out = weir(t, cliReaderSecret, "workflow", "replay", id, "--replayer", replayerScript(t, "changed"))
	require.Equal(t, exitReplayDiverged, out.code, out.stderr)
	require.Contains(t, out.stderr, "does not replay")
	require.Contains(t, out.stderr, "TimerStarted", "the divergence is named")
	out = weir(t, cliReaderSecret, "workflow", "replay", id, "--replayer", replayerScript(t, "empty"))
	require.Equal(t, exitUsage, out.code, out.stderr)
	require.Contains(t, out.stderr, "echo", "no workflow of the history's kind")

	// From a file written by history --json.
	out = weir(t, cliReaderSecret, "workflow", "history", id, "--json")
	require.Equal(t, 0, out.code, out.stderr)
	file := filepath.Join(t.TempDir(), "history.json")
	require.NoError(t, os.WriteFile(file, []byte(out.stdout), 0o600))
	out = weir(t, "", "workflow", "replay", "--file", file, "--replayer", replayerScript(t, "same"))
	require.Equal(t, 0, out.code, out.stderr)
	out = weir(t, "", "workflow", "replay", "--file", file, "--replayer", replayerScript(t, "changed"))
	require.Equal(t, exitReplayDiverged, out.code, out.stderr)

	// Mistakes.
	for _, args := range [][]string{
		{"workflow", "replay", id},                                    // no replayer
		{"workflow", "replay", "--replayer", "x"},                     // nothing to replay
		{"workflow", "replay", id, "--file", file, "--replayer", "x"}, // both
		{"workflow", "replay", "--file", filepath.Join(t.TempDir(), "missing"), "--replayer", "x"},
	} {
		out = weir(t, cliReaderSecret, args...)
		require.Equal(t, exitUsage, out.code, "%v: %s", args, out.stderr)
	}
	out = weir(t, cliReaderSecret, "workflow", "replay", "nope-"+uuid.NewString(), "--replayer", replayerScript(t, "same"))
	require.Equal(t, exitNotFound, out.code, out.stderr)
}
