package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

type echoArgs struct {
	Msg string `json:"msg"`
}

func (echoArgs) Kind() string { return "echo" }

type echoWorkflow struct {
	workflow.Defaults[echoArgs, echoArgs]
}

func (w *echoWorkflow) Run(_ workflow.Context, args echoArgs) (echoArgs, error) { return args, nil }

type waitArgs struct{}

func (waitArgs) Kind() string { return "wait_for_go" }

type goSignal struct {
	Value string `json:"value"`
}

func (goSignal) Kind() string { return "go" }

type waitWorkflow struct {
	workflow.Defaults[waitArgs, string]
}

func (w *waitWorkflow) Run(ctx workflow.Context, _ waitArgs) (string, error) {
	sig, err := workflow.GetSignalChannel[goSignal](ctx).Receive(ctx)
	if err != nil {
		return "", err
	}
	return "got " + sig.Value, nil
}

const (
	cliAdminSecret  = "cli-admin-secret-0123456789"
	cliReaderSecret = "cli-reader-secret-0123456789"
	cliWriterSecret = "cli-writer-secret-0123456789"
)

// cliOutput is what an in-process run of the CLI printed and returned.
type cliOutput struct {
	code   int
	stderr string
	stdout string
}

// setupCLI serves the API (with a worker running the test workflows) and
// returns a function running the CLI against it with the given token.
func setupCLI(t *testing.T) (func(t *testing.T, token string, args ...string) *cliOutput, string) {
	t.Helper()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)

	w, err := worker.New(pool, &worker.Config{Schema: schema})
	require.NoError(t, err)
	worker.AddWorkflow(w, &echoWorkflow{})
	worker.AddWorkflow(w, &waitWorkflow{})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
	})

	srv, err := server.New(pool, &server.Config{Schema: schema, Tokens: []*server.Token{
		{Name: "admin", Namespaces: []string{"default"}, Role: server.RoleAdmin, Secret: cliAdminSecret},
		{Name: "reader", Namespaces: []string{"*"}, Role: server.RoleRead, Secret: cliReaderSecret},
		{Name: "writer", Namespaces: []string{"default"}, Role: server.RoleWrite, Secret: cliWriterSecret},
	}})
	require.NoError(t, err)
	httpServer := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		httpServer.Close()
		require.NoError(t, srv.Close())
	})

	return func(t *testing.T, token string, args ...string) *cliOutput {
		t.Helper()
		env := map[string]string{"WEIR_ADDRESS": httpServer.URL, "WEIR_TOKEN": token}
		var stdout, stderr bytes.Buffer
		code := runEnv(t.Context(), args, &stdout, &stderr, func(name string) string { return env[name] })
		return &cliOutput{code: code, stderr: stderr.String(), stdout: stdout.String()}
	}, httpServer.URL
}

func TestWorkflowCommand(t *testing.T) {
	t.Parallel()

	weir, address := setupCLI(t)
	ok := func(t *testing.T, out *cliOutput) string {
		t.Helper()
		require.Equal(t, 0, out.code, out.stderr)
		return out.stdout
	}

	t.Run("AuthExitCodes", func(t *testing.T) {
		t.Parallel()
		out := weir(t, "", "workflow", "list")
		require.Equal(t, exitAuth, out.code)
		require.Equal(t, "weir: missing bearer token (Authorization: Bearer <token>)\n", out.stderr, "the message alone")
		out = weir(t, cliReaderSecret, "workflow", "start", "echo")
		require.Equal(t, exitAuth, out.code)
		require.Equal(t, "weir: token reader has role read; this needs write\n", out.stderr)
		out = weir(t, cliWriterSecret, "workflow", "start", "echo", "-n", "elsewhere")
		require.Equal(t, exitAuth, out.code)
		// The token can come from another variable: here one that is unset.
		out = weir(t, cliWriterSecret, "workflow", "list", "--token-env", "NOT_SET")
		require.Equal(t, exitAuth, out.code)
	})

	t.Run("Completion", func(t *testing.T) {
		t.Parallel()
		require.Contains(t, ok(t, weir(t, "", "completion", "bash")), "__start_weir")
		out := ok(t, weir(t, "", "__complete", "workflow", "list", "--state", ""))
		require.Contains(t, out, "timed_out")
	})

	t.Run("DescribeListHistory", func(t *testing.T) {
		t.Parallel()
		prefix := "cli-list-" + uuid.NewString() + "-"
		for _, suffix := range []string{"a", "b", "c"} {
			ok(t, weir(t, cliWriterSecret, "workflow", "start", "echo", "--workflow-id", prefix+suffix, "--args", `{"msg":"`+suffix+`"}`, "--wait"))
		}

		out := ok(t, weir(t, cliReaderSecret, "workflow", "list", "--prefix", prefix, "--limit", "1"))
		require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 2, "a header and one run")
		require.Contains(t, out, "WORKFLOW ID")
		require.Contains(t, weir(t, cliReaderSecret, "workflow", "list", "--prefix", prefix, "--limit", "1").stderr, "--cursor")

		var all server.ListResponse
		require.NoError(t, json.Unmarshal([]byte(ok(t, weir(t, cliReaderSecret, "workflow", "list", "--prefix", prefix, "--limit", "1", "--all", "--json"))), &all))
		require.Len(t, all.Runs, 3)
		require.Empty(t, all.NextCursor)

		out = ok(t, weir(t, cliReaderSecret, "workflow", "describe", prefix+"a"))
		require.Regexp(t, `State:\s+completed`, out)
		require.Regexp(t, `Kind:\s+echo`, out)
		var d server.DescribeResponse
		require.NoError(t, json.Unmarshal([]byte(ok(t, weir(t, cliReaderSecret, "workflow", "describe", prefix+"a", "--json"))), &d))
		require.Equal(t, "completed", d.State)

		out = ok(t, weir(t, cliReaderSecret, "workflow", "history", prefix+"b"))
		require.Contains(t, out, "WorkflowStarted")
		require.Contains(t, out, "WorkflowCompleted")
		var h server.HistoryResponse
		require.NoError(t, json.Unmarshal([]byte(ok(t, weir(t, cliReaderSecret, "workflow", "history", prefix+"b", "--json"))), &h))
		require.Len(t, h.Events, int(d.HistoryLength))

		missingID := "nope-" + uuid.NewString()
		missing := weir(t, cliReaderSecret, "workflow", "describe", missingID)
		require.Equal(t, exitNotFound, missing.code)
		require.Equal(t, "weir: no workflow "+missingID+"\n", missing.stderr)
		missing = weir(t, cliReaderSecret, "workflow", "describe", missingID, "--json")
		require.Equal(t, exitNotFound, missing.code)
		require.Contains(t, missing.stdout, `"code":"not_found"`, "--json prints the error's body")
	})

	t.Run("SignalResultTerminate", func(t *testing.T) {
		t.Parallel()
		workflowID := "cli-signal-" + uuid.NewString()
		var run server.RunResponse
		require.NoError(t, json.Unmarshal([]byte(ok(t, weir(t, cliWriterSecret, "workflow", "start", "wait_for_go", "--workflow-id", workflowID, "--json"))), &run))
		require.True(t, run.Created)

		out := weir(t, cliReaderSecret, "workflow", "result", workflowID, "--wait", "200ms")
		require.Equal(t, exitStillRunning, out.code, out.stderr)

		ok(t, weir(t, cliWriterSecret, "workflow", "signal", workflowID, "go", "--args", `{"value":"now"}`, "--run-id", run.RunID.String()))
		require.JSONEq(t, `"got now"`, ok(t, weir(t, cliReaderSecret, "workflow", "result", workflowID)))

		// A second run, terminated: result exits 6, cancel of it 4.
		ok(t, weir(t, cliWriterSecret, "workflow", "start", "wait_for_go", "--workflow-id", workflowID))
		require.Contains(t, ok(t, weir(t, cliWriterSecret, "workflow", "terminate", workflowID, "--reason", "enough")), "terminate requested")
		out = weir(t, cliReaderSecret, "workflow", "result", workflowID)
		require.Equal(t, exitNotCompleted, out.code)
		require.Contains(t, out.stderr, "terminated")
		out = weir(t, cliWriterSecret, "workflow", "cancel", workflowID)
		require.Equal(t, exitConflict, out.code)
		require.Contains(t, out.stderr, "is already terminated")
	})

	t.Run("StartIdempotentAndConflict", func(t *testing.T) {
		t.Parallel()
		workflowID := "cli-start-" + uuid.NewString()
		args := []string{"workflow", "start", "wait_for_go", "--workflow-id", workflowID, "--request-id", "r1"}
		first := ok(t, weir(t, cliWriterSecret, args...))
		require.Regexp(t, `Created:\s+true`, first)
		again := ok(t, weir(t, cliWriterSecret, args...))
		require.Regexp(t, `Created:\s+false`, again)

		out := weir(t, cliWriterSecret, "workflow", "start", "wait_for_go", "--workflow-id", workflowID, "--request-id", "r2")
		require.Equal(t, exitConflict, out.code)
		require.Contains(t, out.stderr, "already has a live run")
		require.NotContains(t, out.stderr, `"generation":1`, "the body only with --json")
		out = weir(t, cliWriterSecret, "workflow", "start", "wait_for_go", "--workflow-id", workflowID, "--request-id", "r2", "--json")
		require.Equal(t, exitConflict, out.code)
		require.Contains(t, out.stdout, `"code":"workflow_already_started"`)
		require.Contains(t, out.stdout, `"generation":1`)
		ok(t, weir(t, cliWriterSecret, "workflow", "terminate", workflowID))
	})

	t.Run("Usage", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"workflow", "describe"},
			{"workflow", "list", "--bogus"},
			{"workflow", "list", "--state", "asleep"},
			{"workflow", "start", "echo", "--args", "{not json"},
			{"workflow", "start", "echo", "--run-timeout", "soon"},
		} {
			out := weir(t, cliWriterSecret, args...)
			require.Equal(t, exitUsage, out.code, "%v: %s", args, out.stderr)
		}
		out := weir(t, cliWriterSecret, "workflow", "query", "x")
		require.Equal(t, exitUsage, out.code, "query needs a kind: %s", out.stderr)
		out = weir(t, cliWriterSecret, "workflow", "query", "no-such-workflow", "status")
		require.Equal(t, exitNotFound, out.code, out.stderr)

		// An address without a scheme is http; a server that isn't there is exit 1.
		ok(t, weir(t, cliReaderSecret, "workflow", "list", "--address", strings.TrimPrefix(address, "http://")))
		out = weir(t, cliReaderSecret, "workflow", "list", "--address", "http://127.0.0.1:1")
		require.Equal(t, exitFailure, out.code, out.stderr)
	})
}
