package devexamples_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/devexamples"
	"github.com/weirhq/weir/worker"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestExamples(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)

	c, err := client.New(pool, &client.Config{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })

	startWorker := func(t *testing.T) {
		w, err := worker.New(pool, &worker.Config{Queues: devexamples.Queues(), Schema: schema})
		require.NoError(t, err)
		devexamples.Register(w)
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			require.NoError(t, w.Stop(stopCtx))
		})
	}
	startWorker(t)

	examples := devexamples.Examples()
	started, err := devexamples.Start(ctx, c)
	require.NoError(t, err)
	require.Len(t, started, len(examples))
	for i, s := range started {
		require.Equal(t, examples[i].WorkflowID, s.WorkflowID)
		require.NoError(t, s.Skipped, s.WorkflowID)
		require.True(t, s.Run.Created, s.WorkflowID)
	}
	waitExamples(ctx, t, c, examples)

	// The saga compensated: its history has the refund and the release.
	history, err := c.History(ctx, "order-1002", uuid.Nil, nil)
	require.NoError(t, err)
	var kinds []string
	for _, event := range history.Events {
		if event.Type == client.EventActivityScheduled {
			attrs, err := client.DecodeAttributes[struct{ Kind string }](event)
			require.NoError(t, err)
			kinds = append(kinds, attrs.Kind)
		}
	}
	require.Equal(t, []string{"saga.reserve", "saga.charge", "saga.ship", "saga.refund", "saga.release"}, kinds)

	// The approval answers its query while it waits.
	var status devexamples.Status
	require.NoError(t, c.Query(ctx, "approval-r-1", uuid.Nil, devexamples.StatusQuery{}, &status, nil))
	require.Equal(t, "pending", status.State)

	// Starting again starts nothing new.
	again, err := devexamples.Start(ctx, c)
	require.NoError(t, err)
	require.Len(t, again, len(examples))
	for i, s := range again {
		require.NoError(t, s.Skipped, s.WorkflowID)
		require.False(t, s.Run.Created, s.WorkflowID)
		require.Equal(t, started[i].Run.RunID, s.Run.RunID, s.WorkflowID)
		require.Equal(t, int64(1), s.Run.Generation, s.WorkflowID)
	}
	waitExamples(ctx, t, c, examples)
}

// An example whose workflow ID has a live run of someone else's is
// skipped, not an error: weir dev still starts.
func TestExamplesSkipOthersRuns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)

	c, err := client.New(pool, &client.Config{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })

	// No worker runs: the run stays live.
	_, err = c.Start(ctx, devexamples.HelloArgs{Name: "mine"}, &client.StartOpts{WorkflowID: "hello-ada", Queue: "nobody"})
	require.NoError(t, err)

	started, err := devexamples.Start(ctx, c)
	require.NoError(t, err)
	require.Len(t, started, len(devexamples.Examples()))
	require.Equal(t, "hello-ada", started[0].WorkflowID)
	require.ErrorIs(t, started[0].Skipped, client.ErrWorkflowAlreadyStarted)
	require.Nil(t, started[0].Run)
	for _, s := range started[1:] {
		require.NoError(t, s.Skipped, s.WorkflowID)
		require.True(t, s.Run.Created, s.WorkflowID)
	}
}

// waitExamples waits until every example is in the state it wants; a
// running one must also have finished its first workflow task (it waits on
// its timer and signal, with no task pending).
func waitExamples(ctx context.Context, t *testing.T, c *client.Client, examples []devexamples.Example) {
	t.Helper()
	for _, ex := range examples {
		require.Eventually(t, func() bool {
			d, err := c.Describe(ctx, ex.WorkflowID, uuid.Nil)
			require.NoError(t, err)
			if ex.Want == "running" {
				return d.State == "running" && d.TaskJobID == nil && d.HistoryLength > 1
			}
			require.Contains(t, []string{"running", ex.Want}, d.State, ex.WorkflowID)
			return d.State == ex.Want
		}, time.Minute, 20*time.Millisecond, ex.WorkflowID)
	}
}
