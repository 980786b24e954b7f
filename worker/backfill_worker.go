package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/schedule"
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
	names := b.w.names
	err = pgx.BeginFunc(ctx, b.w.pool, func(tx pgx.Tx) error {
		var (
			namespace, scheduleID, state string
			rangeEnd                     time.Time
			nextDueAt                    *time.Time
			started                      int64
		)
		err := tx.QueryRow(ctx, "SELECT namespace, schedule_id, state, range_end, next_due_at, started FROM "+names.Backfill+
			" WHERE backfill_id = $1 FOR UPDATE", job.Args.BackfillID).Scan(&namespace, &scheduleID, &state, &rangeEnd, &nextDueAt, &started)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && (state != string(client.BackfillRunning) || nextDueAt == nil)) {
			done = true
			_, err = fencing.CompleteTx[*fencing.Driver](ctx, tx, job)
			return err
		}
		if err != nil {
			return err
		}
		var (
			cron, kind, queue, timeZone string
			every                       int64
			anchor                      time.Time
			args                        json.RawMessage
		)
		err = tx.QueryRow(ctx, "SELECT coalesce(cron, ''), coalesce(extract(epoch FROM every) * 1000000, 0)::bigint, time_zone, anchor,"+
			" workflow_kind, workflow_args, queue FROM "+names.Schedule+" WHERE namespace = $1 AND schedule_id = $2",
			namespace, scheduleID).Scan(&cron, &every, &timeZone, &anchor, &kind, &args, &queue)
		if errors.Is(err, pgx.ErrNoRows) {
			done = true
			return b.finish(ctx, tx, job, client.BackfillFailed, nil, started, "the schedule was deleted")
		}
		if err != nil {
			return err
		}
		c, err := b.w.schedules.client(namespace)
		if err != nil {
			return err
		}
		spec := &schedule.Spec{Cron: cron, Every: time.Duration(every) * time.Microsecond, TimeZone: timeZone}
		due := *nextDueAt
		for range backfillBatch {
			if _, err := c.StartTx(ctx, tx, client.RawArgs{JSON: args, KindName: kind}, &client.StartOpts{
				Queue: queue, RequestID: client.ScheduleRequestID(scheduleID, due), WorkflowID: client.ScheduleWorkflowID(scheduleID, due),
			}); err != nil {
				return fmt.Errorf("starting the run due at %s: %w", due.UTC().Format(time.RFC3339Nano), err)
			}
			started++
			next, err := spec.NextBefore(anchor, due, rangeEnd)
			if errors.Is(err, schedule.ErrNeverDue) {
				done = true
				return b.finish(ctx, tx, job, client.BackfillCompleted, nil, started, "")
			}
			if err != nil {
				return err
			}
			due = next
		}
		_, err = tx.Exec(ctx, "UPDATE "+names.Backfill+" SET next_due_at = $2, started = $3, error = '', updated_at = now() WHERE backfill_id = $1",
			job.Args.BackfillID, due, started)
		return err
	})
	return done, err
}

// finish records a backfill's end and completes its job in tx.
func (b *backfillWorker) finish(ctx context.Context, tx pgx.Tx, job *river.Job[client.BackfillArgs], state client.BackfillState,
	next *time.Time, started int64, reason string,
) error {
	if _, err := tx.Exec(ctx, "UPDATE "+b.w.names.Backfill+" SET state = $2, next_due_at = $3, started = $4, error = $5, updated_at = now()"+
		" WHERE backfill_id = $1", job.Args.BackfillID, string(state), next, started, reason); err != nil {
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
	if _, err := b.w.pool.Exec(ctx, "UPDATE "+b.w.names.Backfill+" SET error = $2, updated_at = now() WHERE backfill_id = $1 AND state = 'running'",
		job.Args.BackfillID, batchErr.Error()); err != nil {
		b.w.config.Logger.WarnContext(ctx, "weir: recording a backfill's error failed",
			slog.String("backfill_id", job.Args.BackfillID.String()), slog.String("error", err.Error()))
	}
}
