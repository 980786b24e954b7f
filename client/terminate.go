package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/closing"
	"github.com/weirhq/weir/internal/store"
)

// ErrRunClosed is matched (errors.Is) by a *RunClosedError.
var ErrRunClosed = errors.New("weir: workflow run already closed")

// RunClosedError means an operation needs a running run but the run has
// closed, in State.
type RunClosedError struct {
	Generation int64
	RunID      uuid.UUID
	State      string
	WorkflowID string
}

func (e *RunClosedError) Error() string {
	return fmt.Sprintf("weir: workflow %s run %s (generation %d) is already %s", e.WorkflowID, e.RunID, e.Generation, e.State)
}

// Is makes errors.Is(err, ErrRunClosed) true.
func (e *RunClosedError) Is(target error) bool { return target == ErrRunClosed }

// Terminate is TerminateTx in a transaction of its own.
func (c *Client) Terminate(ctx context.Context, workflowID string, runID uuid.UUID, reason string) error {
	return c.inTxErr(ctx, func(tx pgx.Tx) error { return c.TerminateTx(ctx, tx, workflowID, runID, reason) })
}

// TerminateTx ends a run at once, without running any more of its code: it
// closes terminated with reason, its pending activities' jobs are cancelled
// (running ones see their context cancelled) and Get returns a
// *WorkflowFailedError. A zero runID means the workflow's live run.
//
// Terminating a run already terminated with the same reason is a no-op, so a
// retried Terminate succeeds; a run closed any other way is a
// *RunClosedError.
func (c *Client) TerminateTx(ctx context.Context, tx pgx.Tx, workflowID string, runID uuid.UUID, reason string) error {
	runID, err := c.resolveRun(ctx, tx, workflowID, runID)
	if err != nil {
		return err
	}
	failure := &closing.Failure{Message: reason, Type: closing.FailureTypeTerminated}
	closed, err := closing.Close(ctx, tx, c.store, c.jobsOn(tx), runID, "terminated", failure)
	switch {
	case errors.Is(err, closing.ErrNotRunning):
		if closed.State == "terminated" && closed.Failure != nil && closed.Failure.Message == reason {
			return nil
		}
		return &RunClosedError{Generation: closed.Generation, RunID: runID, State: closed.State, WorkflowID: workflowID}
	case errors.Is(err, pgx.ErrNoRows):
		return &RunNotFoundError{RunID: runID, WorkflowID: workflowID}
	case err != nil:
		return fmt.Errorf("terminating workflow %s run %s: %w", workflowID, runID, err)
	}
	return nil
}

// resolveRun returns runID, checked to belong to workflowID in the client's
// namespace; a zero runID resolves to the workflow's latest run.
func (c *Client) resolveRun(ctx context.Context, db store.DBTX, workflowID string, runID uuid.UUID) (uuid.UUID, error) {
	resolved, err := c.store.ResolveRun(ctx, db, store.RunKey{Namespace: c.config.Namespace, WorkflowID: workflowID, RunID: runID})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return uuid.Nil, &RunNotFoundError{RunID: runID, WorkflowID: workflowID}
	case err != nil:
		return uuid.Nil, fmt.Errorf("looking up workflow %s run %s: %w", workflowID, runID, err)
	}
	return resolved, nil
}
