package weirtest

import (
	"context"
	"io"

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
