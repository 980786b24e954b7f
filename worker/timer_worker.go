package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/inbox"
	"github.com/weirhq/weir/internal/timer"
)

// startTimer inserts the River job that fires a TimerStarted event's timer,
// due at its fire time.
func (w *Worker) startTimer(ctx context.Context, tx pgx.Tx, run *runRow, runID uuid.UUID, e history.Event) error {
	attrs, err := history.Decode[*history.TimerStartedAttributes](e)
	if err != nil {
		return err
	}
	if _, err := w.riverClient.InsertTx(ctx, tx, timer.Args{RunID: runID, StartedEventID: e.ID}, &river.InsertOpts{
		MaxAttempts: activityMaxAttemptsUnlimited, Queue: run.Queue, ScheduledAt: attrs.FireAt,
	}); err != nil {
		return fmt.Errorf("inserting timer of event %d: %w", e.ID, err)
	}
	return nil
}

// cancelJobs cancels the River jobs of activities and timers a task
// cancelled. A running activity sees its context cancelled; its outcome, if
// any still comes, is dropped.
func (w *Worker) cancelJobs(ctx context.Context, tx pgx.Tx, runID uuid.UUID, activities, timers []int64) error {
	for _, scheduledEventID := range activities {
		var jobID int64
		err := tx.QueryRow(ctx, "SELECT job_id FROM "+w.names.Activity+" WHERE run_id = $1 AND scheduled_event_id = $2",
			runID, scheduledEventID).Scan(&jobID)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return fmt.Errorf("finding job of activity %d: %w", scheduledEventID, err)
		}
		if _, err := w.riverClient.JobCancelTx(ctx, tx, jobID); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
			return fmt.Errorf("cancelling job %d of activity %d: %w", jobID, scheduledEventID, err)
		}
	}
	for _, startedEventID := range timers {
		match, err := json.Marshal(timer.Args{RunID: runID, StartedEventID: startedEventID})
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "SELECT id FROM "+w.names.RiverJob+" WHERE kind = $1 AND args @> $2::jsonb"+
			" AND state IN ('available', 'scheduled', 'retryable')", timer.Kind, match)
		if err != nil {
			return fmt.Errorf("finding job of timer %d: %w", startedEventID, err)
		}
		jobIDs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return fmt.Errorf("finding job of timer %d: %w", startedEventID, err)
		}
		for _, jobID := range jobIDs {
			if _, err := w.riverClient.JobCancelTx(ctx, tx, jobID); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
				return fmt.Errorf("cancelling job %d of timer %d: %w", jobID, startedEventID, err)
			}
		}
	}
	return nil
}

// timerWorker fires durable timers. Every worker serves it.
type timerWorker struct {
	river.WorkerDefaults[timer.Args]

	w *Worker
}

func (t *timerWorker) Work(ctx context.Context, job *river.Job[timer.Args]) error {
	attrs, err := json.Marshal(&history.TimerFiredAttributes{StartedEventID: job.Args.StartedEventID})
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, t.w.pool, func(tx pgx.Tx) error {
		_, err := inbox.Deliver(ctx, tx, t.w.names, t.w.riverClient, job.Args.RunID, &inbox.Item{
			Attributes: attrs,
			DedupKey:   fmt.Sprintf("timer:%d", job.Args.StartedEventID),
			Type:       string(history.EventTimerFired),
		})
		if err != nil && !errors.Is(err, inbox.ErrRunClosed) {
			return err
		}
		_, err = fencing.CompleteTx[*fencing.Driver](ctx, tx, job)
		return err
	})
}
