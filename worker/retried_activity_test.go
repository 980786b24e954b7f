package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/worker"
)

// TestRetriedActivityDoesNotRunAgain: an activity job retried by hand
// (River UI's Retry is River's JobRetry) once its activity is resolved, or
// its run closed, ends as a no-op: the activity's code does not run again,
// and the job's attempt says why.
func TestRetriedActivityDoesNotRunAgain(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	reserve := &ReserveActivity{}
	w, err := worker.New(b.pool, &worker.Config{Schema: b.schema})
	require.NoError(t, err)
	worker.AddWorkflow(w, &CartWorkflow{})
	worker.AddActivity(w, reserve)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
	})
	riverClient, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: b.schema})
	require.NoError(t, err)

	run, err := b.client.Start(ctx, CartArgs{}, nil)
	require.NoError(t, err)
	updateCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var n int
	require.NoError(t, b.client.Update(updateCtx, run.WorkflowID, run.RunID, AddToCart{SKU: "apple"}, &n, nil))
	require.Equal(t, int64(1), reserve.calls.Load())
	var jobID int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT id FROM "+b.names.RiverJob+" WHERE kind = 'reserve'").Scan(&jobID))

	retry := func(t *testing.T, why string) {
		t.Helper()
		_, err := riverClient.JobRetry(ctx, jobID)
		require.NoError(t, err)
		var state string
		requireEventually(t, func() bool {
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT state FROM "+b.names.RiverJob+" WHERE id = $1", jobID).Scan(&state))
			return state == "completed" || state == "cancelled" || state == "discarded"
		})
		require.Equal(t, int64(1), reserve.calls.Load(), "the activity ran again")
		require.Equal(t, "cancelled", state)
		var lastError string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT errors[array_length(errors, 1)]->>'error' FROM "+b.names.RiverJob+" WHERE id = $1",
			jobID).Scan(&lastError))
		require.Contains(t, lastError, why)
	}

	// The activity is resolved; the run goes on.
	retry(t, "already resolved")

	require.NoError(t, b.client.Signal(ctx, run.WorkflowID, uuid.Nil, DoneSignal{}, nil))
	items, err := getWithin[[]string](ctx, t, run)
	require.NoError(t, err)
	require.Equal(t, []string{"reserved apple"}, items)

	// The run is closed.
	retry(t, "is completed")
	requireHistoryWellFormed(ctx, t, b, run)
	var inbox int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.Inbox+" WHERE run_id = $1", run.RunID).Scan(&inbox))
	require.Zero(t, inbox)
}

// TestRetriedRiverWorkerDoesNotRunAgain: a plain River worker added as an
// activity is not run again when its job is retried after its run closed.
func TestRetriedRiverWorkerDoesNotRunAgain(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	startWorker(ctx, t, b, nil)
	riverClient, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: b.schema})
	require.NoError(t, err)

	run, err := b.client.Start(ctx, NotifyArgs{To: "ann@example.com"}, nil)
	require.NoError(t, err)
	result, err := getWithin[string](ctx, t, run)
	require.NoError(t, err)
	require.Equal(t, "sent to ann@example.com", result)
	require.Equal(t, "ann@example.com", <-b.email.sent)

	var jobID int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT id FROM "+b.names.RiverJob+" WHERE kind = $1", EmailArgs{}.Kind()).Scan(&jobID))
	_, err = riverClient.JobRetry(ctx, jobID)
	require.NoError(t, err)
	var state string
	requireEventually(t, func() bool {
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT state FROM "+b.names.RiverJob+" WHERE id = $1", jobID).Scan(&state))
		return state == "completed" || state == "cancelled" || state == "discarded"
	})
	require.Equal(t, "cancelled", state)
	select {
	case to := <-b.email.sent:
		require.Failf(t, "the River worker ran again", "sent to %s", to)
	default:
	}
}
