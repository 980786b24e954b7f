package fencing_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
)

// TestLeaseRecovery covers F4: expired leases are recovered within the
// bound, live ones never are, and renewal stops at River's deadline.
func TestLeaseRecovery(t *testing.T) {
	t.Parallel()

	const (
		leaseTTL       = 1 * time.Second
		heartbeat      = 150 * time.Millisecond
		reaperInterval = 100 * time.Millisecond
		pollInterval   = 50 * time.Millisecond // testConfig's FetchPollInterval
		// slack covers scheduling noise on a loaded 2-core CI machine.
		slack = 2 * time.Second
	)
	shortConfig := func() *fencing.Config {
		return &fencing.Config{HeartbeatInterval: heartbeat, LeaseTTL: leaseTTL, ReaperInterval: reaperInterval}
	}

	t.Run("DiscardedPastMaxAttempts", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		sink := newEventSink()
		driver := newDriver(t, pool, sink, shortConfig())
		worker := newBlockWorker(t)
		client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, worker: worker})

		inserted, err := client.Insert(ctx, blockArgs{}, &river.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		attempt := recv(t, worker.started)
		driver.StopHeartbeats()

		row := waitForState(ctx, t, pool, schema, inserted.Job.ID, "discarded")
		require.Equal(t, 1, row.Errors)
		require.False(t, row.LeaseToken.Valid)
		// The reaper reports what it reaped once its transaction committed,
		// so possibly just after the job is seen discarded.
		sink.waitFor(t, fencing.EventLeaseExpired, inserted.Job.ID, 1)
		require.GreaterOrEqual(t, driver.Stats().LeasesExpired, int64(1))

		attempt.release <- complete
		sink.waitFor(t, fencing.EventStaleWriteRejected, inserted.Job.ID, 1)
		require.Equal(t, "discarded", getJob(ctx, t, pool, schema, inserted.Job.ID).State)
	})

	t.Run("HeartbeatingJobWithoutTimeoutKeepsLease", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		sink := newEventSink()
		driver := newDriver(t, pool, sink, &fencing.Config{
			HeartbeatInterval: 100 * time.Millisecond, LeaseTTL: 400 * time.Millisecond, ReaperInterval: 50 * time.Millisecond,
		})
		worker := newBlockWorker(t)
		worker.timeout = -1 // no River timeout: River's rescuer would never take it either
		client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, worker: worker})

		inserted, err := client.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		attempt := recv(t, worker.started)
		// A second fenced client with free slots, ready to steal the job if
		// its lease ever lapsed.
		startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, nil), worker: worker})
		require.NoError(t, fencing.Heartbeat(attempt.ctx, map[string]int{"progress": 1}))

		// 30 renewals at 100ms is about 3s: over 7 times LeaseTTL.
		start := time.Now()
		sink.waitFor(t, fencing.EventLeaseRenewed, inserted.Job.ID, 30)
		require.Greater(t, time.Since(start), 5*400*time.Millisecond)

		row := getJob(ctx, t, pool, schema, inserted.Job.ID)
		require.Equal(t, "running", row.State)
		require.Equal(t, 1, row.Attempt)
		require.Zero(t, sink.count(fencing.EventLeaseExpired, 0))
		require.NoError(t, attempt.ctx.Err())
		select {
		case other := <-worker.started:
			t.Fatalf("job was fetched again as attempt %d while its lease was renewed", other.job.Attempt)
		default:
		}

		attempt.release <- complete
		waitForState(ctx, t, pool, schema, inserted.Job.ID, "completed")
	})

	t.Run("PartitionedWorkerIsRecoveredAndFenced", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		sinkA := newEventSink()
		driverA := newDriver(t, pool, sinkA, shortConfig())
		worker := newBlockWorker(t)
		clientA := startClient(ctx, t, pool, schema, &clientOpts{driver: driverA, worker: worker})

		inserted, err := clientA.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		jobID := inserted.Job.ID
		attempt1 := recv(t, worker.started)
		startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, shortConfig()), worker: worker})

		// Worker A is partitioned: it keeps running but stops renewing.
		driverA.StopHeartbeats()
		partitioned := time.Now()

		attempt2 := recv(t, worker.started)
		recovered := time.Since(partitioned)
		require.Equal(t, 2, attempt2.job.Attempt)
		bound := leaseTTL + reaperInterval + pollInterval
		require.Less(t, recovered, bound+slack, "F4 bound is %s", bound)
		t.Logf("recovered %s after the last heartbeat (F4 bound %s)", recovered, bound)

		row := getJob(ctx, t, pool, schema, jobID)
		require.Equal(t, "running", row.State)
		require.Equal(t, 1, row.Errors, "the recovery records an error entry")

		var errorText string
		require.NoError(t, pool.QueryRow(ctx, "SELECT errors[1]->>'error' FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+" WHERE id = $1", jobID).Scan(&errorText))
		require.Contains(t, errorText, "lease")
		require.Contains(t, errorText, "expired")

		// The partitioned worker's late completion is rejected.
		attempt1.release <- complete
		sinkA.waitFor(t, fencing.EventStaleWriteRejected, jobID, 1)
		require.Equal(t, "running", getJob(ctx, t, pool, schema, jobID).State)

		attempt2.release <- complete
		final := waitForState(ctx, t, pool, schema, jobID, "completed")
		require.Equal(t, 2, final.Attempt)
	})

	t.Run("ReaperWakesFetchers", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		driverA := newDriver(t, pool, nil, shortConfig())
		worker := newBlockWorker(t)
		clientA := startClient(ctx, t, pool, schema, &clientOpts{driver: driverA, worker: worker})
		inserted, err := clientA.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		attempt1 := recv(t, worker.started)
		// B polls once a minute: only the reaper's notification can make it
		// fetch the recovered job within the bound.
		startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, shortConfig()), poll: time.Minute, worker: worker})

		driverA.StopHeartbeats()
		partitioned := time.Now()
		attempt2 := recv(t, worker.started)
		require.Equal(t, inserted.Job.ID, attempt2.job.ID)
		require.Less(t, time.Since(partitioned), leaseTTL+reaperInterval+slack)
		attempt1.release <- complete
		attempt2.release <- complete
		waitForState(ctx, t, pool, schema, inserted.Job.ID, "completed")
	})

	t.Run("RenewalRefusedCancelsAttempt", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		sink := newEventSink()
		driver := newDriver(t, pool, sink, shortConfig())
		worker := newBlockWorker(t)
		client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, worker: worker})

		inserted, err := client.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		attempt := recv(t, worker.started)

		rescue(ctx, t, pool, schema, inserted.Job.ID)
		rescued := time.Now()
		select {
		case <-attempt.ctx.Done():
		case <-time.After(waitTimeout):
			t.Fatal("attempt context not cancelled after its lease was lost")
		}
		require.Less(t, time.Since(rescued), heartbeat+slack, "cancelled within one heartbeat interval")
		require.ErrorIs(t, context.Cause(attempt.ctx), fencing.ErrLeaseLost)
		var lost *fencing.LeaseLostError
		require.ErrorAs(t, context.Cause(attempt.ctx), &lost)
		require.Equal(t, inserted.Job.ID, lost.JobID)
		require.Equal(t, 1, lost.Attempt)
		require.Equal(t, 1, sink.count(fencing.EventLeaseLost, inserted.Job.ID))
		stats := driver.Stats()
		require.Equal(t, int64(1), stats.LeasesLost)
		require.GreaterOrEqual(t, stats.LeasesRenewed, int64(0))

		// A heartbeat by the stale attempt is refused too.
		require.ErrorIs(t, fencing.Heartbeat(attempt.ctx, nil), fencing.ErrLeaseLost)
		attempt.release <- func(ctx context.Context, _ *river.Job[blockArgs]) error { return context.Cause(ctx) }
	})

	t.Run("RenewalStopsPastRiverDeadline", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		sink := newEventSink()
		driver := newDriver(t, pool, sink, shortConfig())
		worker := newBlockWorker(t)
		worker.timeout = 300 * time.Millisecond
		const stuck = 100 * time.Millisecond
		client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, worker: worker, stuck: stuck})

		inserted, err := client.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		attempt := recv(t, worker.started)
		lease, ok := fencing.LeaseFromContext(attempt.ctx) // teaches the keeper Worker.Timeout
		require.True(t, ok)
		require.NotEmpty(t, lease.Token)
		startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, shortConfig()), worker: worker})

		// The attempt ignores its cancelled context (it is stuck). Renewals
		// stop at its deadline and the job is recovered one lease later.
		attempt2 := recv(t, worker.started)
		require.Equal(t, 2, attempt2.job.Attempt)
		require.Less(t, time.Since(lease.AttemptedAt), worker.timeout+stuck+leaseTTL+reaperInterval+pollInterval+slack)
		row := getJob(ctx, t, pool, schema, inserted.Job.ID)
		require.Equal(t, 1, row.Errors, "recovered by lease expiry, with an error entry")

		attempt.release <- complete
		attempt2.release <- complete
		waitForState(ctx, t, pool, schema, inserted.Job.ID, "completed")
	})
}

// TestHeartbeatDetails: details stored by one attempt are read by the next.
func TestHeartbeatDetails(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	worker := newBlockWorker(t)
	client := startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, nil), worker: worker})

	require.ErrorIs(t, fencing.Heartbeat(ctx, nil), fencing.ErrNoLease)
	_, ok := fencing.LeaseFromContext(ctx)
	require.False(t, ok)

	inserted, err := client.Insert(ctx, blockArgs{}, nil)
	require.NoError(t, err)
	attempt1 := recv(t, worker.started)
	lease1, ok := fencing.LeaseFromContext(attempt1.ctx)
	require.True(t, ok)
	require.Nil(t, lease1.Details)
	require.Equal(t, inserted.Job.ID, lease1.JobID)
	require.Equal(t, 1, lease1.Attempt)
	before := lease1.ExpiresAt

	require.NoError(t, fencing.Heartbeat(attempt1.ctx, map[string]int{"step": 3}))
	lease1, _ = fencing.LeaseFromContext(attempt1.ctx)
	require.JSONEq(t, `{"step": 3}`, string(lease1.Details))
	require.True(t, lease1.ExpiresAt.After(before), "Heartbeat renews at once")

	rescue(ctx, t, pool, schema, inserted.Job.ID)
	startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, nil), worker: worker})
	attempt2 := recv(t, worker.started)
	lease2, ok := fencing.LeaseFromContext(attempt2.ctx)
	require.True(t, ok)
	require.Equal(t, 2, lease2.Attempt)
	require.NotEqual(t, lease1.Token, lease2.Token)
	var details map[string]int
	require.NoError(t, json.Unmarshal(lease2.Details, &details))
	require.Equal(t, map[string]int{"step": 3}, details)

	attempt1.release <- func(ctx context.Context, _ *river.Job[blockArgs]) error { return errors.New("stale") }
	attempt2.release <- complete
	waitForState(ctx, t, pool, schema, inserted.Job.ID, "completed")
}
