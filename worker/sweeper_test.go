package worker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
)

// TestSweeperLeavesConsumedOutcomes: the sweeper turns an ended activity job
// into its outcome only if no task consumed it meanwhile. A task holds the
// run's lock from before it takes the outcome until it retires the activity,
// so the sweeper checks under that lock; checking first put an outcome the
// task had just consumed back into the inbox, for a task with nothing to do.
func TestSweeperLeavesConsumedOutcomes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)

	// A run whose tasks no worker serves (its queue), past its first task,
	// with one pending activity whose job has completed.
	run, err := b.client.Start(ctx, OrderArgs{ID: "s", Cents: []int64{1}}, &client.StartOpts{Queue: "nobody"})
	require.NoError(t, err)
	var jobID int64
	require.NoError(t, b.pool.QueryRow(ctx, "INSERT INTO "+b.names.RiverJob+
		" (args, kind, max_attempts, queue, state, attempt, attempted_at, finalized_at)"+
		" VALUES ('{}', 'charge', 1, 'nobody', 'completed', 1, now(), now()) RETURNING id").Scan(&jobID))
	_, err = b.pool.Exec(ctx, "INSERT INTO "+b.names.Activity+" (run_id, scheduled_event_id, job_id, kind) VALUES ($1, 5, $2, 'charge')", run.RunID, jobID)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, "UPDATE "+b.names.Run+" SET next_event_id = 6, task_job_id = NULL WHERE run_id = $1", run.RunID)
	require.NoError(t, err)

	// A task holds the run's lock while the sweeper finds the activity...
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+b.names.Run+" WHERE run_id = $1 FOR UPDATE", run.RunID)
	require.NoError(t, err)
	startWorker(ctx, t, b, &worker.Config{SweepInterval: 20 * time.Millisecond})
	time.Sleep(500 * time.Millisecond)
	// ... then consumes its outcome and retires it.
	_, err = tx.Exec(ctx, "DELETE FROM "+b.names.Activity+" WHERE run_id = $1", run.RunID)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	time.Sleep(500 * time.Millisecond)
	var inboxed int
	var taskJobID *int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+b.names.Inbox+" WHERE run_id = $1), task_job_id FROM "+
		b.names.Run+" WHERE run_id = $1", run.RunID).Scan(&inboxed, &taskJobID))
	require.Zero(t, inboxed, "the consumed outcome was not delivered again")
	require.Nil(t, taskJobID, "no task was queued for nothing")
}
