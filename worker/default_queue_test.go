package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
)

// AppArgs are an application's own River job, in River's default queue.
type AppArgs struct{}

func (AppArgs) Kind() string { return "app_job" }

type AppWorker struct {
	river.WorkerDefaults[AppArgs]
	done chan struct{}
}

func (w *AppWorker) Work(context.Context, *river.Job[AppArgs]) error {
	w.done <- struct{}{}
	return nil
}

// TestDefaultQueue: weir's jobs go to weir's own default queue, not River's
// "default", so an application's River client that serves "default" and
// fetches every kind (no FetchOnlyKnownKinds) never takes a workflow task or
// an activity, and weir's worker serves them without configuration.
func TestDefaultQueue(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	require.NotEqual(t, river.QueueDefault, client.QueueDefault)

	// A run started with defaults, before any weir worker runs.
	run, err := b.client.Start(ctx, OrderArgs{ID: "o", Cents: []int64{1, 2}}, nil)
	require.NoError(t, err)

	// The application's client, serving River's default queue, works an
	// app job inserted after the run's task: a fetch of "default" would have
	// taken the older task first, or with it.
	app := &AppWorker{done: make(chan struct{}, 1)}
	workers := river.NewWorkers()
	river.AddWorker(workers, app)
	appClient, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		Schema:  b.schema,
		Workers: workers,
	})
	require.NoError(t, err)
	require.NoError(t, appClient.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, appClient.Stop(stopCtx))
	})
	_, err = appClient.Insert(ctx, AppArgs{}, nil)
	require.NoError(t, err)
	select {
	case <-app.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the application's job never ran")
	}
	var queue string
	var attempt int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT queue, attempt FROM "+b.names.RiverJob+
		" WHERE id = (SELECT task_job_id FROM "+b.names.Run+" WHERE run_id = $1)", run.RunID).Scan(&queue, &attempt))
	require.Equal(t, client.QueueDefault, queue)
	require.Zero(t, attempt, "the application's client did not fetch weir's task")

	// A weir worker with default configuration runs it, activities included.
	startWorker(ctx, t, b, nil)
	receipt, err := getWithin[Receipt](ctx, t, run)
	require.NoError(t, err)
	require.Equal(t, int64(3), receipt.Total)
	var inDefault int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.RiverJob+" WHERE queue = $1 AND kind <> 'app_job'",
		river.QueueDefault).Scan(&inDefault))
	require.Zero(t, inDefault, "no weir job in River's default queue")
}
