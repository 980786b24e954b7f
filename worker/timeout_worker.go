package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/closing"
	"github.com/weirhq/weir/internal/store"
)

// timeoutWorker ends a run that is still running at its deadline. Every
// worker serves it.
type timeoutWorker struct {
	river.WorkerDefaults[closing.TimeoutArgs]

	w *Worker
}

func (t *timeoutWorker) Work(ctx context.Context, job *river.Job[closing.TimeoutArgs]) error {
	var snooze time.Duration
	err := pgx.BeginFunc(ctx, t.w.pool, func(tx pgx.Tx) error {
		run, err := t.w.store.LockRunDeadlines(ctx, tx, job.Args.RunID)
		if errors.Is(err, pgx.ErrNoRows) {
			run, err = &store.RunDeadlines{}, nil // gone: nothing to time out
		}
		if err != nil {
			return err
		}
		which, deadline := "run", run.RunDeadline
		if run.ExecutionDeadline != nil && (deadline == nil || run.ExecutionDeadline.Before(*deadline)) {
			which, deadline = "execution", run.ExecutionDeadline
		}
		switch {
		case run.State != "running" || deadline == nil:
		case run.Now.Before(*deadline):
			snooze = deadline.Sub(run.Now)
			return nil
		default:
			_, err := closing.Close(ctx, tx, t.w.store, t.w.riverClient, job.Args.RunID, "timed_out", closing.TimeoutFailure(*deadline, which))
			if err != nil && !errors.Is(err, closing.ErrNotRunning) {
				return err
			}
		}
		_, err = fencing.CompleteTx[*fencing.Driver](ctx, tx, job)
		return err
	})
	if err != nil {
		return fmt.Errorf("timing out run %s: %w", job.Args.RunID, err)
	}
	if snooze > 0 {
		return river.JobSnooze(snooze)
	}
	return nil
}
