package fencing_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
)

// plainCompleted is River's JobSetStateIfRunningMany of a completion of id,
// as a plain client's completer or JobCompleteTx writes it.
func plainCompleted(schema string, id int64) *riverdriver.JobSetStateIfRunningManyParams {
	params := riverdriver.JobSetStateCompleted(id, time.Now(), nil)
	return &riverdriver.JobSetStateIfRunningManyParams{
		ID: []int64{id}, Attempt: []*int{params.Attempt}, ErrData: [][]byte{params.ErrData},
		FinalizedAt: []*time.Time{params.FinalizedAt}, MetadataDoMerge: []bool{false}, MetadataUpdates: [][]byte{nil},
		ScheduledAt: []*time.Time{params.ScheduledAt}, Schema: schema, State: []rivertype.JobState{params.State},
	}
}

// plainRescue is River's rescuer's write of id, as River's rescuer in a plain
// process makes it: the job looks stuck (the horizon is in the future).
func plainRescue(schema string, id int64) *riverdriver.JobRescueManyParams {
	return &riverdriver.JobRescueManyParams{
		ID: []int64{id}, Error: [][]byte{[]byte(`{"error": "Stuck job rescued by JobRescuer"}`)}, FinalizedAt: []*time.Time{nil},
		ScheduledAt: []time.Time{time.Now()}, Schema: schema, State: []string{"retryable"}, StuckHorizon: time.Now().Add(time.Hour),
	}
}

// TestMixedFleet: River's own statements, run by a client on plain
// riverpgxv5 (an old fleet member during a rollout, River's rescuer in a
// plain process), cannot take a job from a fenced attempt whose lease is
// alive, nor move its token; on rows without a live lease they keep working.
func TestMixedFleet(t *testing.T) {
	t.Parallel()

	t.Run("PlainWritesCannotTakeALiveLease", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		sink := newEventSink()
		worker := newBlockWorker(t)
		// Not leader: no reaper or rescuer of its own.
		client := startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, sink, nil), noLeader: true, worker: worker})
		inserted, err := client.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		jobID := inserted.Job.ID
		attempt := recv(t, worker.started)
		held := getJob(ctx, t, pool, schema, jobID)
		require.True(t, held.LeaseExpiresAt.Valid, "the fenced attempt holds a live lease")

		plain := riverpgxv5.New(pool)
		// River's completer: a statement of its own.
		rows, err := plain.GetExecutor().JobSetStateIfRunningMany(ctx, plainCompleted(schema, jobID))
		require.NoError(t, err, "River's completer gets no error to retry")
		require.Len(t, rows, 1)
		require.Equal(t, rivertype.JobStateRunning, rows[0].State, "River gets the row back still running: no event")
		// River's rescuer.
		_, err = plain.GetExecutor().JobRescueMany(ctx, plainRescue(schema, jobID))
		require.NoError(t, err)
		// JobCompleteTx: inside a transaction.
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
		rows, err = plain.UnwrapExecutor(tx).JobSetStateIfRunningMany(ctx, plainCompleted(schema, jobID))
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, rivertype.JobStateRunning, rows[0].State)
		require.NoError(t, tx.Commit(ctx))

		row := getJob(ctx, t, pool, schema, jobID)
		require.Equal(t, "running", row.State)
		require.Equal(t, held.LeaseToken, row.LeaseToken, "the holder keeps its token")
		require.Equal(t, held.LeaseLastToken, row.LeaseLastToken, "the holder's token is not moved to lease_last_token")
		require.Equal(t, held.Errors, row.Errors, "no rescue error")
		require.Empty(t, attemptLog(ctx, t, pool, schema, jobID), "no attempt ended")

		// The holder completes it, once.
		attempt.release <- complete
		done := waitForState(ctx, t, pool, schema, jobID, "completed")
		require.Equal(t, held.LeaseToken, done.LeaseLastToken)
		require.Equal(t, []string{"completed"}, attemptLog(ctx, t, pool, schema, jobID))
		require.Zero(t, sink.count(fencing.EventStaleWriteRejected, 0))
	})

	// The case: a plain client's attempt, rescued and fetched again
	// by a fenced client, calls JobCompleteTx while the fenced attempt holds
	// the job. The job stays the fenced attempt's, which completes it.
	t.Run("PlainAttemptCannotCompleteAFencedJob", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		worker := newBlockWorker(t)
		plain := startClient(ctx, t, pool, schema, &clientOpts{noLeader: true, worker: worker})
		inserted, err := plain.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		jobID := inserted.Job.ID
		plainAttempt := recv(t, worker.started)
		rescue(ctx, t, pool, schema, jobID)
		startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, nil), noLeader: true, worker: worker})
		fencedAttempt := recv(t, worker.started)
		require.Equal(t, 2, fencedAttempt.job.Attempt)
		held := getJob(ctx, t, pool, schema, jobID)
		require.True(t, held.LeaseExpiresAt.Valid)

		type result struct {
			err                             error
			state                           rivertype.JobState
			completeTxErr, completeTxCommit error
		}
		results := make(chan result, 1)
		plainAttempt.release <- func(ctx context.Context, job *river.Job[blockArgs]) error {
			var res result
			defer func() { results <- res }()
			// fencing.CompleteTx on River's driver refuses it and aborts.
			if tx, err := pool.Begin(ctx); err == nil {
				_, res.completeTxErr = fencing.CompleteTx[*riverpgxv5.Driver](ctx, tx, job)
				res.completeTxCommit = tx.Commit(ctx)
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				res.err = err
				return err
			}
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			updated, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
			if err != nil {
				res.err = err
				return err
			}
			res.state = updated.State
			res.err = tx.Commit(ctx)
			return nil // River's completer then writes "completed" too
		}
		res := recv(t, results)
		require.ErrorIs(t, res.completeTxErr, fencing.ErrLeaseLost)
		require.ErrorIs(t, res.completeTxCommit, pgx.ErrTxCommitRollback)
		require.NoError(t, res.err)
		require.Equal(t, rivertype.JobStateRunning, res.state, "River's JobCompleteTx could not complete the job")
		row := getJob(ctx, t, pool, schema, jobID)
		require.Equal(t, "running", row.State)
		require.Equal(t, held.LeaseToken, row.LeaseToken)

		completed := make(chan error, 1)
		fencedAttempt.release <- func(ctx context.Context, job *river.Job[blockArgs]) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				completed <- err
				return err
			}
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			if _, err := fencing.CompleteTx[*fencing.Driver](ctx, tx, job); err != nil {
				completed <- err
				return err
			}
			completed <- tx.Commit(ctx)
			return nil
		}
		require.NoError(t, recv(t, completed), "the holder's completion is its own, not a repeat of another's")
		done := waitForState(ctx, t, pool, schema, jobID, "completed")
		require.Equal(t, held.LeaseToken, done.LeaseLastToken)
		require.Equal(t, 2, done.Attempt)
	})

	t.Run("PlainWritesApplyWithoutALiveLease", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		driver := newDriver(t, pool, nil, nil)
		worker := newBlockWorker(t)
		client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, noLeader: true, maxWorkers: 2, worker: worker})
		table := pgx.Identifier{schema, "river_job"}.Sanitize()
		plain := riverpgxv5.New(pool)

		// A lease that expired (its process stopped renewing it).
		driver.StopHeartbeats()
		expired, err := client.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		recv(t, worker.started)
		_, err = pool.Exec(ctx, "UPDATE "+table+" SET lease_expires_at = now() - interval '1 second' WHERE id = $1", expired.Job.ID)
		require.NoError(t, err)
		rows, err := plain.GetExecutor().JobSetStateIfRunningMany(ctx, plainCompleted(schema, expired.Job.ID))
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, rivertype.JobStateCompleted, rows[0].State)

		// A running row without a lease (fetched by a plain client, or
		// running before the fencing migration).
		var unleased int64
		require.NoError(t, pool.QueryRow(ctx, "INSERT INTO "+table+
			" (args, kind, max_attempts, state, attempt, attempted_at) VALUES ('{}', 'plain', 5, 'running', 1, now()) RETURNING id").Scan(&unleased))
		_, err = plain.GetExecutor().JobRescueMany(ctx, plainRescue(schema, unleased))
		require.NoError(t, err)
		row := getJob(ctx, t, pool, schema, unleased)
		require.Equal(t, "retryable", row.State)
		require.Equal(t, []string{"retryable"}, attemptLog(ctx, t, pool, schema, unleased))
	})
}

// TestJudgedWriteEndsTheLease: the Pilot's judged path (River's own
// statement after the Pilot's check, taken for an executor it cannot run
// its one-statement write on) ends the lease it proved before River's
// statement, which the lease trigger would otherwise refuse.
func TestJudgedWriteEndsTheLease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	sink := newEventSink()
	driver := newDriver(t, pool, sink, nil)
	worker := newBlockWorker(t)
	client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, noLeader: true, worker: worker})
	inserted, err := client.Insert(ctx, blockArgs{}, nil)
	require.NoError(t, err)
	jobID := inserted.Job.ID
	attempt := recv(t, worker.started)
	t.Cleanup(func() { attempt.release <- complete })
	lease, ok := fencing.LeaseFromContext(attempt.ctx)
	require.True(t, ok)
	require.False(t, lease.ExpiresAt.IsZero())

	params := plainCompleted(schema, jobID)
	params.MetadataDoMerge[0] = true
	params.MetadataUpdates[0] = []byte(`{"weir:fencing:proof": "` + lease.Token + `/` + strconv.Itoa(lease.Attempt) + `/` +
		strconv.FormatInt(lease.AttemptedAt.UnixMicro(), 10) + `"}`)
	// River's own pool executor: the Pilot cannot take its pool out of it.
	rows, err := driver.PluginPilot().JobSetStateIfRunningMany(ctx, riverpgxv5.New(pool).GetExecutor(), params)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, rivertype.JobStateCompleted, rows[0].State)
	done := getJob(ctx, t, pool, schema, jobID)
	require.Equal(t, "completed", done.State)
	require.Equal(t, lease.Token, done.LeaseLastToken.String)
	require.Equal(t, []string{"completed"}, attemptLog(ctx, t, pool, schema, jobID))
	require.Zero(t, sink.count(fencing.EventStaleWriteRejected, 0))
}
