package weirtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// ReplayHistory checks that wf still replays the history read from r: a
// JSON document as client.WriteHistoryJSON, `weir workflow history --json`
// or Env.WriteHistoryJSON write it (or a bare JSON array of its events).
// It returns nil, or an error wrapping a *workflow.NonDeterminismError (it
// matches workflow.ErrNonDeterminism) whose EventID is the first divergent
// event, or another error of worker.Replayer.ReplayEvents. To replay
// histories of several workflow types, or from Postgres, use
// worker.NewReplayer.
func ReplayHistory[A workflow.Args, R any](ctx context.Context, wf workflow.Workflow[A, R], r io.Reader) error {
	replayer, err := newReplayer(wf)
	if err != nil {
		return err
	}
	_, err = replayer.ReplayHistory(ctx, r)
	return err
}

// ReplayHistoryFile is ReplayHistory for the JSON file at path.
func ReplayHistoryFile[A workflow.Args, R any](ctx context.Context, wf workflow.Workflow[A, R], path string) error {
	replayer, err := newReplayer(wf)
	if err != nil {
		return err
	}
	_, err = replayer.ReplayHistoryFile(ctx, path)
	return err
}

func newReplayer[A workflow.Args, R any](wf workflow.Workflow[A, R]) (*worker.Replayer, error) {
	replayer, err := worker.NewReplayer(nil)
	if err != nil {
		return nil, err
	}
	if err := worker.AddReplayerWorkflowSafely(replayer, wf); err != nil {
		return nil, err
	}
	return replayer, nil
}

// UpdateGoldenEnv names the environment variable that makes
// [CheckGoldenHistory] (re)write golden histories instead of only checking
// them: WEIR_UPDATE_GOLDEN=1 go test ./...
const UpdateGoldenEnv = "WEIR_UPDATE_GOLDEN"

// CheckGoldenHistory fails tb unless wf, as compiled now, replays the golden
// history in the file at path: a history recorded by an earlier version of
// the code and committed (in testdata/, say), so that a change which breaks
// the determinism of runs already in flight fails the build instead of
// production. env is an Env that has just executed wf; with
// $WEIR_UPDATE_GOLDEN set, its history is first written to path (review the
// diff: a golden history changes only when recorded behaviour does). A
// missing file fails with a hint to record it.
func CheckGoldenHistory[A workflow.Args, R any](tb testing.TB, env *Env, wf workflow.Workflow[A, R], path string) {
	tb.Helper()
	if os.Getenv(UpdateGoldenEnv) != "" {
		var buf bytes.Buffer
		if err := env.WriteHistoryJSON(&buf); err != nil {
			tb.Fatalf("weirtest: recording golden history %s: %v", path, err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatalf("weirtest: recording golden history %s: %v", path, err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil { //nolint:gosec // a file for the repository
			tb.Fatalf("weirtest: recording golden history %s: %v", path, err)
		}
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		tb.Fatalf("weirtest: no golden history %s: record it with %s=1 go test", path, UpdateGoldenEnv)
	}
	if err := ReplayHistoryFile(context.Background(), wf, path); err != nil {
		tb.Fatalf("weirtest: %s no longer replays: %v", path, err)
	}
}
