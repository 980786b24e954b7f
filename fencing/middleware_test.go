package fencing_test

import (
	"context"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
)

// leaseSeer is a user's worker middleware that records whether the attempt it
// wraps already holds its fencing lease.
type leaseSeer struct {
	river.MiddlewareDefaults
	saw chan bool
}

func (m *leaseSeer) Work(ctx context.Context, _ *rivertype.JobRow, doInner func(context.Context) error) error {
	_, ok := fencing.LeaseFromContext(ctx)
	m.saw <- ok
	return doInner(ctx)
}

// TestPluginIsOutermostWorkerMiddleware: the fencing plugin is one more
// worker middleware of the client (River's own tests that count a client's
// middleware count one more), and it wraps the user's middleware, so that
// every user middleware already runs inside the attempt's lease.
func TestPluginIsOutermostWorkerMiddleware(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	driver := newDriver(t, pool, nil, nil)
	seer := &leaseSeer{saw: make(chan bool, 1)}
	config := testConfig(schema, &clientOpts{driver: driver})
	//lint:ignore SA1019 River's deprecated WorkerMiddleware field must still reach the lease.
	config.WorkerMiddleware = []rivertype.WorkerMiddleware{seer}
	client, err := river.NewClient(driver, config)
	require.NoError(t, err)
	startFully(ctx, t, client, config)
	t.Cleanup(func() { stopClient(ctx, t, client) })

	_, err = client.Insert(ctx, noopArgs{}, nil)
	require.NoError(t, err)
	require.True(t, recv(t, seer.saw), "the user's middleware ran outside the attempt's lease")
}
