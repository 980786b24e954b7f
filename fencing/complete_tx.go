package fencing

import (
	"context"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
)

// CompleteTx is river.JobCompleteTx, fenced: it marks the job completed as
// part of tx only if the attempt whose work context is ctx still holds the
// job. Otherwise it returns a *LeaseLostError (matching ErrLeaseLost) and
// aborts tx, so tx.Commit fails and none of the caller's writes in tx commit,
// even if the caller ignores the error.
//
// With the fencing Driver, river.JobCompleteTx is fenced too; CompleteTx adds
// a second check that does not depend on River routing the write through the
// fencing Pilot: it fails closed unless the row River returns is completed.
//
//	_, err := fencing.CompleteTx[*fencing.Driver](ctx, tx, job)
func CompleteTx[TDriver riverdriver.Driver[TTx], TTx any, TArgs river.JobArgs](ctx context.Context, tx TTx, job *river.Job[TArgs]) (*river.Job[TArgs], error) {
	if st := attemptFromContext(ctx); st != nil {
		st.observeDeadline(ctx)
	}
	updated, err := river.JobCompleteTx[TDriver](ctx, tx, job)
	if err != nil {
		return nil, err
	}
	if updated.State != rivertype.JobStateCompleted {
		client, clientErr := river.ClientFromContextSafely[TTx](ctx)
		if clientErr == nil {
			abortTx(ctx, client.Driver().UnwrapExecutor(tx), job.ID)
		}
		return nil, &LeaseLostError{Attempt: job.Attempt, JobID: job.ID, Op: "complete"}
	}
	return updated, nil
}
