package worker

import (
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

// bindWorkflow erases a workflow's types for the engine.
func bindWorkflow[A workflow.Args, R any](wf workflow.Workflow[A, R]) *replay.Definition {
	return replay.Bind(wf)
}

// failureFromError is what an activity's error becomes in history.
func failureFromError(err error) *history.Failure {
	return replay.FailureFromError(err)
}
