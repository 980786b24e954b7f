package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/store"
)

// Description is a run's state as an operator needs it.
type Description struct {
	// Args are the run's args as its start encoded them (codec output:
	// JSON with the default codec).
	Args []byte

	// ClosedAt is when the run closed; nil while it runs.
	ClosedAt *time.Time

	// CreatedAt is when the run was started.
	CreatedAt time.Time

	// ExecutionDeadline and RunDeadline are the run's timeouts as
	// deadlines; nil when none was set.
	ExecutionDeadline *time.Time
	RunDeadline       *time.Time

	// Failure is how the run failed, if it did.
	Failure *Failure

	// Generation counts the runs of the workflow ID.
	Generation int64

	// HistoryLength is the number of events in the run's history.
	HistoryLength int64

	// Kind is the workflow's kind.
	Kind string

	// Namespace is the run's namespace.
	Namespace string

	// Parent is the run that started this one as its child workflow; nil
	// for a run started otherwise. Its WorkflowID is empty once retention
	// deleted the parent.
	Parent *RunRef

	// PendingActivities are the activities scheduled and not yet resolved.
	PendingActivities []*PendingActivity

	// PendingInbox are results that arrived and wait for the next workflow
	// task.
	PendingInbox []*PendingInboxItem

	// PendingTimers are the durable timers started and neither fired nor
	// cancelled in history, oldest first.
	PendingTimers []*PendingTimer

	// Queue is the River queue of the run's workflow tasks.
	Queue string

	// Result is the run's result as encoded (codec output), once it
	// completed.
	Result []byte

	// RunID is the run's ID.
	RunID uuid.UUID

	// State is running, completed, failed, cancelled, terminated,
	// continued_as_new or timed_out.
	State string

	// TaskFailure is the last failure of the run's workflow task while it
	// retries; nil when the task has not failed (or the run closed).
	TaskFailure *TaskFailure

	// TaskJobID is the River job of the workflow task queued or running for
	// the run, if any.
	TaskJobID *int64

	// TaskWorkers says whether live workers serve the run's workflow tasks
	// (TaskWorkers.Problem says what is wrong if none does); nil once the
	// run closed.
	TaskWorkers *TaskWorkers

	// UpdatedAt is when the run last changed.
	UpdatedAt time.Time

	// WorkflowID is the run's workflow ID.
	WorkflowID string
}

// PendingActivity is an activity awaiting its outcome.
type PendingActivity struct {
	// Attempt is the River attempt of the job (0 before its first).
	Attempt int

	// AttemptedAt is when the current or last attempt started.
	AttemptedAt *time.Time

	// JobID is the activity's River job; JobState its River state ("" when
	// the job is gone).
	JobID    int64
	JobState string

	// Kind is the activity's kind.
	Kind string

	// LastError is the last attempt's error, if any.
	LastError string

	// LeaseExpiresAt is when the running attempt's lease ends unless
	// renewed; nil when no fenced attempt holds it.
	LeaseExpiresAt *time.Time

	// MaxAttempts is the job's attempt limit.
	MaxAttempts int

	// ScheduledAt is when the job is due (for a retry, its next attempt).
	ScheduledAt *time.Time

	// ScheduledEventID is the history event that scheduled it.
	ScheduledEventID int64
}

// RunRef names a run.
type RunRef struct {
	RunID      uuid.UUID
	WorkflowID string
}

// PendingTimer is a durable timer (workflow.Sleep, workflow.NewTimer) not
// yet resolved in history.
type PendingTimer struct {
	// FireAt is when it fires.
	FireAt time.Time

	// StartedEventID is its TimerStarted event: its identity.
	StartedEventID int64
}

// PendingInboxItem is a result waiting for the run's next workflow task.
type PendingInboxItem struct {
	CreatedAt time.Time
	DedupKey  string
	Type      string
}

// Describe returns the run's state, pending activities and pending inbox. A
// zero runID means the workflow's latest run.
func (c *Client) Describe(ctx context.Context, workflowID string, runID uuid.UUID) (*Description, error) {
	var d *Description
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		resolved, err := c.resolveRun(ctx, tx, workflowID, runID)
		if err != nil {
			return err
		}
		d, err = c.describe(ctx, tx, resolved)
		return err
	})
	return d, err
}

func (c *Client) describe(ctx context.Context, tx pgx.Tx, runID uuid.UUID) (*Description, error) {
	r, err := c.store.DescribeRun(ctx, tx, runID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &RunNotFoundError{RunID: runID}
	}
	if err != nil {
		return nil, fmt.Errorf("describing run %s: %w", runID, err)
	}
	d := &Description{
		Args: r.Args, ClosedAt: r.ClosedAt, CreatedAt: r.CreatedAt, ExecutionDeadline: r.ExecutionDeadline, Failure: decodeFailure(r.Failure),
		Generation: r.Generation, HistoryLength: r.HistoryLength, Kind: r.Kind, Namespace: r.Namespace, Queue: r.Queue, Result: r.Result,
		RunDeadline: r.RunDeadline, RunID: runID, State: r.State, TaskJobID: r.TaskJobID, UpdatedAt: r.UpdatedAt, WorkflowID: r.WorkflowID,
	}
	if r.ParentRunID != nil {
		d.Parent = &RunRef{RunID: *r.ParentRunID}
		if r.ParentWorkflowID != nil {
			d.Parent.WorkflowID = *r.ParentWorkflowID
		}
	}
	if d.State == "running" {
		if d.TaskWorkers, err = c.taskWorkers(ctx, tx, d.Namespace, d.Queue, d.Kind); err != nil {
			return nil, fmt.Errorf("describing run %s: %w", runID, err)
		}
		if d.TaskJobID != nil {
			if d.TaskFailure, err = c.taskFailure(ctx, tx, *d.TaskJobID); err != nil {
				return nil, fmt.Errorf("describing run %s: %w", runID, err)
			}
		}
	}
	if d.PendingActivities, err = store.PendingActivities[PendingActivity](ctx, c.store, tx, runID); err != nil {
		return nil, fmt.Errorf("describing activities of run %s: %w", runID, err)
	}
	if d.PendingTimers, err = store.PendingTimers[PendingTimer](ctx, c.store, tx, runID); err != nil {
		return nil, fmt.Errorf("describing timers of run %s: %w", runID, err)
	}
	if d.PendingInbox, err = store.PendingInbox[PendingInboxItem](ctx, c.store, tx, runID); err != nil {
		return nil, fmt.Errorf("describing inbox of run %s: %w", runID, err)
	}
	return d, nil
}
