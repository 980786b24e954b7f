package fencing_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivershared/riverpilot"
	"github.com/riverqueue/river/rivershared/startstop"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
)

// The fencing Driver must stay usable wherever riverpgxv5's is.
var _ riverdriver.Driver[pgx.Tx] = (*fencing.Driver)(nil)

// TestSeamConformance (F7) fails loudly if River stops routing work through
// the fencing Pilot, stops detecting the driver plugin or the pilot's
// services, or changes the configuration the plugin reads: a River upgrade
// must not silently unfence.
func TestSeamConformance(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	driver := newDriver(t, pool, nil, nil)

	// River's unexported driverPlugin and pilotPlugin interfaces, as of
	// v0.51.2 (plugin.go).
	var _ interface {
		PluginPilot() riverpilot.Pilot
	} = driver
	pilot, ok := driver.PluginPilot().(interface {
		riverpilot.Pilot
		riverpilot.PilotJobRescuer
		PluginMaintenanceServices() []startstop.Service
		PluginServices() []startstop.Service
	})
	require.True(t, ok, "the fencing pilot must implement River's Pilot, PilotJobRescuer and pilotPlugin")
	require.Len(t, pilot.PluginServices(), 2, "lease keeper and lease reaper")
	require.Empty(t, pilot.PluginMaintenanceServices(), "the lease reaper does not follow River's leader")

	config := testConfig(schema, &clientOpts{driver: driver})
	config.JobTimeout = 42 * time.Second
	config.JobStuckThreshold = 7 * time.Second
	river.AddWorker(config.Workers, river.WorkFunc(func(ctx context.Context, job *river.Job[completeTxArgs]) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := river.JobCompleteTx[*fencing.Driver](ctx, tx, job); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}))
	client, err := river.NewClient[pgx.Tx](driver, config)
	require.NoError(t, err)

	// River picked up the driver's pilot.
	require.True(t, driver.IsOwnPilot(client.Pilot()),
		"river.Client.Pilot() is %T, not the driver's pilot: River no longer uses the driver's pilot", client.Pilot())

	// The plugin reads JobTimeout and JobStuckThreshold from River's client.
	timeout, stuck, ok := fencing.ClientTimeouts(client)
	require.True(t, ok, "River's client configuration changed shape")
	require.Equal(t, 42*time.Second, timeout)
	require.Equal(t, 7*time.Second, stuck)
	// The plugin keeps them for the client it saw last, and reads another
	// client's anew (a driver's plugin may serve several clients).
	otherConfig := testConfig(schema, &clientOpts{jobTimeout: 9 * time.Second, stuck: 3 * time.Second})
	other, err := river.NewClient[pgx.Tx](newDriver(t, pool, nil, nil), otherConfig)
	require.NoError(t, err)
	for _, c := range []struct {
		client         *river.Client[pgx.Tx]
		timeout, stuck time.Duration
	}{{client, 42 * time.Second, 7 * time.Second}, {other, 9 * time.Second, 3 * time.Second}, {client, 42 * time.Second, 7 * time.Second}} {
		timeout, stuck, ok := driver.Plugin().TimeoutsOf(c.client)
		require.True(t, ok)
		require.Equal(t, c.timeout, timeout)
		require.Equal(t, c.stuck, stuck)
	}
	require.False(t, fencing.ClientLeaderElectionDisabled(client))
	disabledConfig := testConfig(schema, &clientOpts{noLeader: true})
	disabled, err := river.NewClient[pgx.Tx](newDriver(t, pool, nil, nil), disabledConfig)
	require.NoError(t, err)
	require.True(t, fencing.ClientLeaderElectionDisabled(disabled), "River's client configuration changed shape")

	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(stopCtx))
	})
	completed, cancel := client.Subscribe(river.EventKindJobCompleted)
	t.Cleanup(cancel)

	// The async completer's writes and JobCompleteTx go through the pilot.
	fetchBefore, setStateBefore := driver.PilotCalls()
	_, err = client.Insert(ctx, noopArgs{}, nil)
	require.NoError(t, err)
	recv(t, completed)
	fetchAfter, setStateAfter := driver.PilotCalls()
	require.Greater(t, fetchAfter, fetchBefore, "River fetched without the pilot")
	require.Greater(t, setStateAfter, setStateBefore, "River's completer wrote without the pilot")

	_, err = client.Insert(ctx, completeTxArgs{}, nil)
	require.NoError(t, err)
	recv(t, completed)
	_, setStateTx := driver.PilotCalls()
	require.GreaterOrEqual(t, setStateTx-setStateAfter, int64(2), "JobCompleteTx and the completer's repeat both go through the pilot")

	// Executors River gets from the driver fence JobUpdate.
	require.NotEqual(t, "*riverpgxv5.Executor", typeName(client.Driver().GetExecutor()))
}

func typeName(v any) string { return fmtType(v) }

// TestSeamRescuer (F7): River's rescuer calls the Pilot's JobGetStuck and
// JobRescueMany only when the Pilot implements riverpilot.PilotJobRescuer,
// and otherwise silently uses its own queries, which take any job running
// past the stuck horizon. A River client on the fencing driver runs its
// rescuer over two jobs that both started long before the horizon: one with
// a live lease, which it must leave alone, and one without a lease (fetched
// by an unfenced client), which River's rules rescue. Rescued in the same
// pass, the second shows the rescuer ran.
func TestSeamRescuer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	table := pgx.Identifier{schema, "river_job"}.Sanitize()

	// The jobs run on a client that is never leader, with leases long
	// enough to stay alive however slow the machine is.
	worker := newBlockWorker(t)
	runner := newDriver(t, pool, nil, &fencing.Config{LeaseTTL: 10 * time.Minute, HeartbeatInterval: time.Second, ReaperInterval: time.Second})
	runnerClient := startClient(ctx, t, pool, schema, &clientOpts{driver: runner, maxWorkers: 2, noLeader: true, worker: worker})
	var ids []int64
	for range 2 {
		inserted, err := runnerClient.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		ids = append(ids, inserted.Job.ID)
	}
	for range 2 {
		recv(t, worker.started)
	}
	leased, unleased := ids[0], ids[1]
	// Both started an hour ago as far as River's rescuer can tell; the
	// second has no lease, as if an unfenced client had fetched it.
	_, err := pool.Exec(ctx, "UPDATE "+table+" SET attempted_at = now() - interval '1 hour' WHERE id = ANY($1)", ids)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "UPDATE "+table+" SET lease_expires_at = NULL WHERE id = $1", unleased)
	require.NoError(t, err)
	before := getJob(ctx, t, pool, schema, leased)
	require.Equal(t, "running", before.State)
	require.True(t, before.LeaseExpiresAt.Valid)

	// The leader, whose rescuer runs once when it gains leadership: both
	// jobs are past its horizon and their River timeouts.
	driver := newDriver(t, pool, nil, &fencing.Config{LeaseTTL: 10 * time.Minute, HeartbeatInterval: time.Second, ReaperInterval: time.Second})
	leaderWorker := newBlockWorker(t) // runs the rescued job if it fetches it
	config := testConfig(schema, &clientOpts{driver: driver, worker: leaderWorker})
	config.JobTimeout = 5 * time.Second
	config.RescueStuckJobsAfter = 10 * time.Second
	leader, err := river.NewClient[pgx.Tx](driver, config)
	require.NoError(t, err)
	require.NoError(t, leader.Start(ctx))
	t.Cleanup(func() {
		leaderWorker.finish()
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		require.NoError(t, leader.Stop(stopCtx))
	})

	rescuedError := func(id int64) bool {
		var rescued bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+table+
			" j, unnest(j.errors) e WHERE j.id = $1 AND e->>'error' = 'Stuck job rescued by JobRescuer')", id).Scan(&rescued))
		return rescued
	}
	waitUntil(t, "River's rescuer rescues the job without a lease", func() bool { return rescuedError(unleased) })

	after := getJob(ctx, t, pool, schema, leased)
	require.False(t, rescuedError(leased), "River's rescuer took a job whose lease is alive: it no longer asks the fencing Pilot")
	require.Equal(t, "running", after.State)
	require.Equal(t, before.Attempt, after.Attempt)
	require.Equal(t, before.LeaseToken, after.LeaseToken)
	require.Equal(t, before.Errors, after.Errors)
}
