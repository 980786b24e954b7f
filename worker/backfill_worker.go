package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/schedule"
	"github.com/weirhq/weir/internal/store"
)

const (
	// backfillBatch is the most due times one transaction starts: a batch
	// holds its backfill's row lock and its runs' inserts until it commits.
	backfillBatch = 500

	// backfillSlice is how long one attempt starts batches before it yields
	// (snoozes, and another attempt resumes where the last batch left off):
	// a worker that stops waits for one slice at most, and a long backfill
	// does not hold a River slot for hours.
	backfillSlice = 5 * time.Second
)

// backfillWorker starts the due times of durable backfills
// (client.CreateBackfill) in batches. Every worker serves it.
type backfillWorker struct {
	river.WorkerDefaults[client.BackfillArgs]

	w *Worker
}

// NextRetry retries a backfill whose batch failed (a lost lease, an
// unreachable database) soon: its progress is durable.
func (b *backfillWorker) NextRetry(job *river.Job[client.BackfillArgs]) time.Time {
	return engineRetry(job.Attempt)
}

// Timeout bounds one attempt: a slice and its last batch.
func (b *backfillWorker) Timeout(*river.Job[client.BackfillArgs]) time.Duration {
	return max(b.w.config.TaskTimeout, time.Minute)
}

func (b *backfillWorker) Work(ctx context.Context, job *river.Job[client.BackfillArgs]) error {
	deadline := time.Now().Add(b.w.backfillSlice)
	for {
		done, err := b.batch(ctx, job)
		if err != nil {
			b.recordError(ctx, job, err)
			return fmt.Errorf("backfill %s: %w", job.Args.BackfillID, err)
		}
		if done {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return river.JobSnooze(0)
		}
	}
}

// batch starts up to backfillBatch due times and records the progress in one
// transaction, under the backfill's row lock; the last one completes the job
// too. It reports whether the backfill is over.
func (b *backfillWorker) batch(ctx context.Context, job *river.Job[client.BackfillArgs]) (done bool, err error) {
	db := b.w.store
	err = pgx.BeginFunc(ctx, b.w.pool, func(tx pgx.Tx) error {
		bf, err := db.GetBackfill(ctx, tx, "", job.Args.BackfillID)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && (bf.State != string(client.BackfillRunning) || bf.NextDueAt == nil)) {
			done = true
			_, err = fencing.CompleteTx[*fencing.Driver](ctx, tx, job)
			return err
		}
		if err != nil {
			return err
		}
		sc, err := db.GetSchedule(ctx, tx, store.ScheduleKey{Namespace: bf.Namespace, ID: bf.ScheduleID}, store.NoLock)
		if errors.Is(err, pgx.ErrNoRows) {
			done = true
			return b.finish(ctx, tx, job, bf, client.BackfillFailed, "the schedule was deleted")
		}
		if err != nil {
			return err
		}
		c, err := b.w.schedules.client(bf.Namespace)
		if err != nil {
			return err
		}
		spec := &schedule.Spec{Cron: sc.Cron, Every: sc.Every, TimeZone: sc.TimeZone}
		due := *bf.NextDueAt
		for range backfillBatch {
			if _, err := c.StartTx(ctx, tx, client.RawArgs{JSON: sc.WorkflowArgs, KindName: sc.WorkflowKind}, &client.StartOpts{
				Queue: sc.Queue, RequestID: client.ScheduleRequestID(sc.ID, due), WorkflowID: client.ScheduleWorkflowID(sc.ID, due),
			}); err != nil {
				return fmt.Errorf("starting the run due at %s: %w", due.UTC().Format(time.RFC3339Nano), err)
			}
			bf.Started++
			next, err := spec.NextBefore(sc.Anchor, due, bf.End)
			if errors.Is(err, schedule.ErrNeverDue) {
				done = true
				return b.finish(ctx, tx, job, bf, client.BackfillCompleted, "")
			}
			if err != nil {
				return err
			}
			due = next
		}
		bf.NextDueAt, bf.Error = &due, ""
		return db.SaveBackfill(ctx, tx, bf)
	})
	return done, err
}

// finish records a backfill's end and completes its job in tx.
func (b *backfillWorker) finish(ctx context.Context, tx pgx.Tx, job *river.Job[client.BackfillArgs], bf *store.Backfill,
	state client.BackfillState, reason string,
) error {
	bf.State, bf.NextDueAt, bf.Error = string(state), nil, reason
	if err := b.w.store.SaveBackfill(ctx, tx, bf); err != nil {
		return err
	}
	_, err := fencing.CompleteTx[*fencing.Driver](ctx, tx, job)
	return err
}

// recordError makes a failed batch's error visible on the backfill (it
// stays running: the job retries from the recorded progress).
func (b *backfillWorker) recordError(ctx context.Context, job *river.Job[client.BackfillArgs], batchErr error) {
	if ctx.Err() != nil {
		return
	}
	if err := b.w.store.BackfillError(ctx, b.w.pool, job.Args.BackfillID, batchErr.Error()); err != nil {
		b.w.config.Logger.WarnContext(ctx, "weir: recording a backfill's error failed",
			slog.String("backfill_id", job.Args.BackfillID.String()), slog.String("error", err.Error()))
	}
}
