// Package closing ends runs from outside their workflow code: terminate and
// timeouts. A run closed here stops at once: its pending activities' jobs are
// cancelled, its inbox is cleared and waiters are notified. Workflow code
// closing its own run goes through the workflow task instead.
package closing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/inbox"
	"github.com/weirhq/weir/internal/store"
)

// RiverClient inserts and cancels River jobs in a transaction;
// *river.Client[pgx.Tx] is one.
type RiverClient interface {
	JobCancelTx(ctx context.Context, tx pgx.Tx, jobID int64) (*rivertype.JobRow, error)
	inbox.Inserter
}

// Failure is how a closed run's failure is stored (the same JSON as history's).
type Failure struct {
	Message string `json:"message"`
	Type    string `json:"type,omitempty"`
}

// Failure types of runs closed from outside.
const (
	FailureTypeTerminated = "Terminated"
	FailureTypeTimedOut   = "TimedOut"
)

// ErrNotRunning is returned by Close when the run had already closed; Closed
// tells how.
var ErrNotRunning = errors.New("closing: run is not running")

// Closed describes a run that was already closed.
type Closed struct {
	Failure    *Failure
	Generation int64
	State      string
	WorkflowID string
}

// Close ends the running run runID in tx with state and failure. When the run
// is not running it returns the run's closed state and ErrNotRunning; when it
// does not exist, pgx.ErrNoRows.
func Close(ctx context.Context, tx pgx.Tx, st *store.Store, river RiverClient, runID uuid.UUID, state string, failure *Failure) (*Closed, error) {
	row, err := st.LockClosingRun(ctx, tx, runID)
	if err != nil {
		return nil, err
	}
	current := &Closed{Generation: row.Generation, State: row.State, WorkflowID: row.WorkflowID}
	if current.State != "running" {
		if len(row.Failure) > 0 {
			current.Failure = &Failure{}
			_ = json.Unmarshal(row.Failure, current.Failure)
		}
		return current, ErrNotRunning
	}
	encoded, err := json.Marshal(failure)
	if err != nil {
		return nil, fmt.Errorf("encoding failure: %w", err)
	}
	activityJobs, err := st.CloseRun(ctx, tx, runID, state, encoded)
	if err != nil {
		return nil, fmt.Errorf("closing run %s: %w", runID, err)
	}
	// The queued workflow task has nothing left to do: cancelled, it is not
	// left available (for a worker that may never come) in River UI. Pending
	// activities stop: River cancels queued jobs at once and asks running
	// ones to stop (their context is cancelled).
	if row.TaskJobID != nil {
		activityJobs = append(activityJobs, *row.TaskJobID)
	}
	for _, jobID := range activityJobs {
		if _, err := river.JobCancelTx(ctx, tx, jobID); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
			return nil, fmt.Errorf("cancelling job %d of run %s: %w", jobID, runID, err)
		}
	}
	if err := st.AbandonUpdates(ctx, tx, runID, "the run was "+state+" before the update completed"); err != nil {
		return nil, err
	}
	err = store.Notify(ctx, tx, []string{dbschema.Channel(st.Names().Schema, dbschema.RunClosedChannel)}, []string{runID.String()})
	if err != nil {
		return nil, fmt.Errorf("notifying run closed: %w", err)
	}
	if err := NotifyParent(ctx, tx, st, river, runID); err != nil {
		return nil, err
	}
	if err := CloseChildren(ctx, tx, st, river, runID); err != nil {
		return nil, err
	}
	current.State = state
	return current, nil
}

// TimeoutArgs are the args of the River job that times out a run at its
// deadline.
type TimeoutArgs struct {
	RunID uuid.UUID `json:"run_id"`
}

// TimeoutKind is the River job kind of run timeouts.
const TimeoutKind = "weir.run_timeout"

// Kind implements river.JobArgs.
func (TimeoutArgs) Kind() string { return TimeoutKind }

// TimeoutFailure is the failure of a run that timed out.
func TimeoutFailure(deadline time.Time, which string) *Failure {
	return &Failure{Message: fmt.Sprintf("%s timeout: the run was still running at its deadline %s", which, deadline.UTC().Format(time.RFC3339Nano)), Type: FailureTypeTimedOut}
}
