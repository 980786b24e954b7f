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
	require.Len(t, pilot.PluginServices(), 1, "lease keeper")
	require.Len(t, pilot.PluginMaintenanceServices(), 1, "lease reaper")

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
	fencingPilot, ok := client.Pilot().(*fencing.Pilot)
	require.True(t, ok, "river.Client.Pilot() is %T, not *fencing.Pilot: River no longer uses the driver's pilot", client.Pilot())
	require.Same(t, driver.PluginPilot(), fencingPilot)

	// The plugin reads JobTimeout and JobStuckThreshold from River's client.
	timeout, stuck, ok := fencing.ClientTimeouts(client)
	require.True(t, ok, "River's client configuration changed shape")
	require.Equal(t, 42*time.Second, timeout)
	require.Equal(t, 7*time.Second, stuck)

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
