package fencing

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
)

// CompleteTx is river.JobCompleteTx, fenced: it marks the job completed as
// part of tx only if the attempt whose work context is ctx still holds the
// job. Otherwise it returns a *LeaseLostError (matching ErrLeaseLost) and
// aborts tx, so tx.Commit fails and none of the caller's writes in tx commit,
// even if the caller ignores the error. If the same attempt already
// completed the job (CompleteTx retried after an ambiguous COMMIT that did
// commit), it returns an *AlreadyCompletedError (matching
// ErrAlreadyCompleted) and aborts tx too: the attempt's work committed once,
// with the completion. Outside any attempt (rivertest.WorkContext) it
// completes a running job that no fenced attempt leases, as River does, and
// returns a *NoLeaseError (matching ErrNoLease) for any other.
//
// With the fencing Driver, river.JobCompleteTx is fenced too; CompleteTx adds
// a second check that does not depend on River routing the write through the
// fencing Pilot: it fails closed unless the row River returns is completed by
// the caller's attempt (job's attempt and attempted_at). A write that
// bypassed the Pilot (River's standard pilot completes any running row) to a
// job another attempt holds returns that attempt's row, and is refused.
//
//	_, err := fencing.CompleteTx[*fencing.Driver](ctx, tx, job)
func CompleteTx[TDriver riverdriver.Driver[TTx], TTx any, TArgs river.JobArgs](ctx context.Context, tx TTx, job *river.Job[TArgs]) (*river.Job[TArgs], error) {
	if st := attemptFromContext(ctx); st != nil {
		st.observeDeadline(ctx)
	}
	client, clientErr := river.ClientFromContextSafely[TTx](ctx)
	if clientErr == nil {
		if _, fenced := client.Pilot().(*pilot); !fenced {
			// River's standard pilot returns a job this attempt completed
			// already as if this call had: tell a repeat apart first.
			if err := refuseRepeatedCompletion(ctx, client.Driver().UnwrapExecutor(tx), client.Schema(), job.JobRow); err != nil {
				return nil, err
			}
		}
	}
	updated, err := river.JobCompleteTx[TDriver](ctx, tx, job)
	if err != nil {
		return nil, err
	}
	if !completedBy(updated.JobRow, job.JobRow) {
		lost := &LeaseLostError{Attempt: job.Attempt, JobID: job.ID, Op: "complete"}
		if clientErr == nil {
			abortTx(ctx, client.Driver().UnwrapExecutor(tx), lost)
		}
		return nil, lost
	}
	return updated, nil
}

// refuseRepeatedCompletion returns an *AlreadyCompletedError, and aborts the
// transaction of exec, when the attempt that job describes completed the job
// already (locking the job's row until the transaction ends). The fencing
// Pilot tells repeats apart itself; this serves CompleteTx on other pilots.
func refuseRepeatedCompletion(ctx context.Context, exec riverdriver.ExecutorTx, schema string, job *rivertype.JobRow) error {
	var (
		row   rivertype.JobRow
		state string
	)
	err := exec.QueryRow(ctx, "SELECT state::text, attempt, attempted_at FROM "+tableName(schema, "river_job")+" WHERE id = $1 FOR UPDATE",
		job.ID).Scan(&state, &row.Attempt, &row.AttemptedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // River's JobCompleteTx reports it
	}
	if err != nil {
		return fmt.Errorf("fencing: reading job %d before completing it: %w", job.ID, err)
	}
	row.State = rivertype.JobState(state)
	if !completedBy(&row, job) {
		return nil
	}
	repeat := &AlreadyCompletedError{Attempt: job.Attempt, JobID: job.ID, Op: "complete"}
	abortTx(ctx, exec, repeat)
	return repeat
}

// completedBy reports whether row is the job completed by the attempt that
// attempt describes (same attempt number and start).
func completedBy(row, attempt *rivertype.JobRow) bool {
	if row == nil || row.State != rivertype.JobStateCompleted || row.Attempt != attempt.Attempt {
		return false
	}
	if row.AttemptedAt == nil || attempt.AttemptedAt == nil {
		return row.AttemptedAt == nil && attempt.AttemptedAt == nil
	}
	return row.AttemptedAt.Equal(*attempt.AttemptedAt)
}
