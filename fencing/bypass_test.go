package fencing_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivershared/riverpilot"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
)

// TestPilotBypassPaths (F1): River writes that do not go through the Pilot
// (Client.JobUpdate, Client.JobUpdateTx, river.ResumableSetStepTx) are fenced
// too when a stale attempt makes them.
func TestPilotBypassPaths(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	sinkA := newEventSink()
	worker := newBlockWorker(t)
	clientA := startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, sinkA, nil), worker: worker})
	inserted, err := clientA.Insert(ctx, blockArgs{}, nil)
	require.NoError(t, err)
	jobID := inserted.Job.ID
	attempt1 := recv(t, worker.started)
	rescue(ctx, t, pool, schema, jobID)
	clientB := startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, nil), worker: worker})
	attempt2 := recv(t, worker.started)
	before := getJob(ctx, t, pool, schema, jobID)

	// The stale attempt ignores its context, which the lease keeper may
	// already have cancelled.
	staleCtx := context.WithoutCancel(attempt1.ctx)

	// Client.JobUpdate from the stale attempt.
	_, err = clientA.JobUpdate(staleCtx, jobID, &river.JobUpdateParams{Output: "stale output"})
	require.ErrorIs(t, err, fencing.ErrLeaseLost)

	// Client.JobUpdateTx from the stale attempt: the caller's tx is aborted.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
	_, err = clientA.JobUpdateTx(staleCtx, tx, jobID, &river.JobUpdateParams{Output: "stale output"})
	require.ErrorIs(t, err, fencing.ErrLeaseLost)
	require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxCommitRollback)

	// river.ResumableSetStepTx from the stale attempt, inside a step.
	errs := make(chan error, 2)
	attempt1.release <- func(ctx context.Context, job *river.Job[blockArgs]) error {
		river.ResumableStep(context.WithoutCancel(ctx), "stale_step", nil, func(ctx context.Context) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				errs <- err
				errs <- err
				return err
			}
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			_, err = river.ResumableSetStepTx[*fencing.Driver](ctx, tx, job)
			errs <- err
			errs <- tx.Commit(ctx)
			return err
		})
		return nil
	}
	require.ErrorIs(t, recv(t, errs), fencing.ErrLeaseLost)
	require.ErrorIs(t, recv(t, errs), pgx.ErrTxCommitRollback)
	sinkA.waitFor(t, fencing.EventStaleWriteRejected, jobID, 4) // 3 updates + the attempt's own outcome

	after := getJob(ctx, t, pool, schema, jobID)
	require.Equal(t, before.Metadata, after.Metadata, "no stale output or checkpoint landed")
	require.Equal(t, "running", after.State)

	// The current attempt may update its own job.
	_, err = clientB.JobUpdate(attempt2.ctx, jobID, &river.JobUpdateParams{Output: "current output"})
	require.NoError(t, err)
	require.Equal(t, "current output", getJob(ctx, t, pool, schema, jobID).Metadata["output"])
	attempt2.release <- complete
	waitForState(ctx, t, pool, schema, jobID, "completed")

	// Outside any attempt, JobUpdate is an operator's write and passes.
	_, err = clientB.JobUpdate(ctx, jobID, &river.JobUpdateParams{Output: "operator output"})
	require.NoError(t, err)
}

// TestPilotJobRescuer: River's own rescuer never takes a job whose lease is
// alive, and takes one whose lease expired.
func TestPilotJobRescuer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	driver := newDriver(t, pool, nil, nil)
	worker := newBlockWorker(t)
	// Not leader: its lease reaper must not get there first.
	client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, noLeader: true, worker: worker})
	inserted, err := client.Insert(ctx, blockArgs{}, nil)
	require.NoError(t, err)
	jobID := inserted.Job.ID
	attempt := recv(t, worker.started)
	t.Cleanup(func() { attempt.release <- complete })

	rescuer, ok := driver.PluginPilot().(riverpilot.PilotJobRescuer)
	require.True(t, ok)
	exec := driver.GetExecutor()
	// A horizon in the future: River would consider the job stuck.
	horizon := time.Now().Add(time.Hour)
	rescue := func() {
		t.Helper()
		_, err := rescuer.JobRescueMany(ctx, exec, &riverdriver.JobRescueManyParams{
			ID: []int64{jobID}, Error: [][]byte{[]byte(`{"error": "rescued"}`)}, FinalizedAt: []*time.Time{nil},
			ScheduledAt: []time.Time{time.Now()}, Schema: schema, State: []string{"retryable"}, StuckHorizon: horizon,
		})
		require.NoError(t, err)
	}

	stuck, err := rescuer.JobGetStuck(ctx, exec, &riverdriver.JobGetStuckParams{Max: 10, Schema: schema, StuckHorizon: horizon})
	require.NoError(t, err)
	require.Empty(t, stuck, "a job with a live lease is not stuck")
	rescue()
	require.Equal(t, "running", getJob(ctx, t, pool, schema, jobID).State)

	driver.StopHeartbeats()
	waitPastRestartGrace(ctx, t, pool, 3*time.Second)
	_, err = pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "river_job"}.Sanitize()+" SET lease_expires_at = now() - interval '1 minute' WHERE id = $1", jobID)
	require.NoError(t, err)
	stuck, err = rescuer.JobGetStuck(ctx, exec, &riverdriver.JobGetStuckParams{Max: 10, Schema: schema, StuckHorizon: horizon})
	require.NoError(t, err)
	require.Len(t, stuck, 1)
	rescue()
	require.Equal(t, "retryable", getJob(ctx, t, pool, schema, jobID).State)
}

// TestPilotJobRescuerTakesOnlyJobsStillStuck: between River's rescuer
// reading stuck jobs and rescuing them, a job may finish or start another
// attempt; its rescue must then change nothing. River's statement checks
// the state and the horizon again, under the row lock the Pilot took to
// check the leases; this pins it, since a completed job put back to run
// would be run twice.
func TestPilotJobRescuerTakesOnlyJobsStillStuck(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	driver := newDriver(t, pool, nil, nil)
	worker := newBlockWorker(t)
	client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, maxWorkers: 3, noLeader: true, worker: worker})
	var ids []int64
	for range 3 {
		inserted, err := client.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		ids = append(ids, inserted.Job.ID)
	}
	for range 3 {
		attempt := recv(t, worker.started)
		t.Cleanup(func() { attempt.release <- complete })
	}
	driver.StopHeartbeats()
	waitPastRestartGrace(ctx, t, pool, 3*time.Second)
	table := pgx.Identifier{schema, "river_job"}.Sanitize()
	_, err := pool.Exec(ctx, "UPDATE "+table+" SET lease_expires_at = now() - interval '1 minute' WHERE id = ANY($1)", ids)
	require.NoError(t, err)

	rescuer, ok := driver.PluginPilot().(riverpilot.PilotJobRescuer)
	require.True(t, ok)
	exec := driver.GetExecutor()
	horizon := time.Now().Add(time.Hour)
	stuck, err := rescuer.JobGetStuck(ctx, exec, &riverdriver.JobGetStuckParams{Max: 10, Schema: schema, StuckHorizon: horizon})
	require.NoError(t, err)
	require.Len(t, stuck, 3, "River's rescuer reads all three as stuck")

	// Then, before its rescue: the first job completes, the second starts
	// a new attempt (after the horizon River read it with), the third
	// stays stuck.
	_, err = pool.Exec(ctx, "UPDATE "+table+" SET state = 'completed', finalized_at = now() WHERE id = $1", ids[0])
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "UPDATE "+table+" SET attempted_at = $2 WHERE id = $1", ids[1], horizon.Add(time.Minute))
	require.NoError(t, err)

	params := &riverdriver.JobRescueManyParams{Schema: schema, StuckHorizon: horizon}
	for _, job := range stuck {
		params.ID = append(params.ID, job.ID)
		params.Error = append(params.Error, []byte(`{"error": "rescued"}`))
		params.FinalizedAt = append(params.FinalizedAt, nil)
		params.ScheduledAt = append(params.ScheduledAt, time.Now())
		params.State = append(params.State, "retryable")
	}
	_, err = rescuer.JobRescueMany(ctx, exec, params)
	require.NoError(t, err)

	done := getJob(ctx, t, pool, schema, ids[0])
	require.Equal(t, "completed", done.State, "a job that completed is not put back to run")
	require.Zero(t, done.Errors, "and gets no rescue error")
	require.Equal(t, "running", getJob(ctx, t, pool, schema, ids[1]).State, "a job in a newer attempt is not rescued")
	require.Equal(t, "retryable", getJob(ctx, t, pool, schema, ids[2]).State, "a job still stuck is rescued")
}

// TestPilotJobRescuerPages: jobs with live leases do not hide stuck jobs
// behind them, since River's rescuer stops at a short batch.
func TestPilotJobRescuerPages(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	driver := newDriver(t, pool, nil, nil)
	worker := newBlockWorker(t)
	client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, maxWorkers: 2, noLeader: true, worker: worker})
	var ids []int64
	for range 2 {
		inserted, err := client.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		ids = append(ids, inserted.Job.ID)
	}
	for range 2 {
		attempt := recv(t, worker.started)
		t.Cleanup(func() { attempt.release <- complete })
	}
	driver.StopHeartbeats()
	waitPastRestartGrace(ctx, t, pool, 3*time.Second)
	table := pgx.Identifier{schema, "river_job"}.Sanitize()
	_, err := pool.Exec(ctx, "UPDATE "+table+" SET lease_expires_at = now() + interval '1 hour' WHERE id = $1", ids[0])
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "UPDATE "+table+" SET lease_expires_at = now() - interval '1 minute' WHERE id = $1", ids[1])
	require.NoError(t, err)

	rescuer, ok := driver.PluginPilot().(riverpilot.PilotJobRescuer)
	require.True(t, ok)
	stuck, err := rescuer.JobGetStuck(ctx, driver.GetExecutor(), &riverdriver.JobGetStuckParams{
		Max: 1, Schema: schema, StuckHorizon: time.Now().Add(time.Hour),
	})
	require.NoError(t, err)
	require.Len(t, stuck, 1)
	require.Equal(t, ids[1], stuck[0].ID)
}
