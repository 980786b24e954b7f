package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/weirhq/weir/internal/store"
)

// staleActivity is why an activity's job must not run its code: its run is
// closed, or its activity is no longer pending (resolved, or its run
// deleted), so whoever retried the job (River UI, SQL, River's rescuer),
// nothing the attempt did could count.
type staleActivity struct {
	jobID  int64
	kind   string
	reason string
}

func (e *staleActivity) Error() string {
	return fmt.Sprintf("weir: activity %s (job %d) not run again: %s", e.kind, e.jobID, e.reason)
}

// checkPending returns a *staleActivity, as river.JobCancel's error, unless
// the activity of job jobID is pending in a running run; it fills in meta
// what the attempt reads of its run. Eager attempts skip it: they were
// claimed in the transaction that scheduled their activity.
func (w *Worker) checkPending(ctx context.Context, meta *activityMeta, jobID int64, kind string) error {
	// Pending: recorded as such, and no outcome waiting in the inbox.
	run, pending, err := w.store.ActivityPending(ctx, w.pool, store.ActivityRef{RunID: meta.RunID, ScheduledEventID: meta.ScheduledEventID, JobID: jobID})
	var reason string
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		reason = fmt.Sprintf("its workflow run %s no longer exists", meta.RunID)
	case err != nil:
		return fmt.Errorf("checking that activity %s (job %d) is pending: %w", kind, jobID, err)
	case run.State != "running":
		reason = fmt.Sprintf("its workflow %s run %s is %s", run.WorkflowID, meta.RunID, run.State)
	case !pending:
		reason = fmt.Sprintf("it is already resolved for workflow %s run %s (event %d)", run.WorkflowID, meta.RunID, meta.ScheduledEventID)
	default:
		meta.Generation, meta.Headers, meta.WorkflowID, meta.WorkflowKind = run.Generation, decodeHeaders(run.TraceContext), run.WorkflowID, run.Kind
		return nil
	}
	stale := &staleActivity{jobID: jobID, kind: kind, reason: reason}
	w.config.Logger.WarnContext(ctx, "weir: activity job retried after its activity ended; cancelling it without running it",
		slog.Int64("job_id", jobID), slog.String("kind", kind), slog.String("run_id", meta.RunID.String()), slog.String("reason", reason))
	return river.JobCancel(stale) // recorded as the attempt's error
}

// pendingRiverWorker runs a plain River worker added as an activity only
// while its activity is pending (checkPending), as weir's own activities
// do; a job that is not an activity's runs as it is.
type pendingRiverWorker[T river.JobArgs] struct {
	river.Worker[T]
	w *Worker
}

func (p *pendingRiverWorker[T]) Work(ctx context.Context, job *river.Job[T]) error {
	if meta := activityMetaOf(job.Metadata); meta != nil {
		if err := p.w.checkPending(ctx, meta, job.ID, job.Kind); err != nil {
			return err
		}
	}
	return p.Worker.Work(ctx, job)
}
