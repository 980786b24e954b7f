package worker_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
)

// TestBoundaryFolding: a worker folds every task's boundary into its first
// command's row, and a task with no command keeps a row of its own. Every
// reader (paged History, the replayer, the weir_history view) sees the same
// history, IDs 1, 2, 3… without gaps, and the runs replay.
func TestBoundaryFolding(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	startWith(ctx, t, b, func(w *worker.Worker) {
		worker.AddWorkflow(w, &SumWorkflow{})
		worker.AddWorkflow(w, &SequentialWorkflow{})
		worker.AddActivity(w, b.charge)
	})
	rowsOf := func(runID uuid.UUID) (rows, withBoundary int) {
		t.Helper()
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*), count(boundary) FROM "+b.names.Event+" WHERE run_id = $1", runID).
			Scan(&rows, &withBoundary))
		return rows, withBoundary
	}

	// A run of three activities: 12 events, 4 tasks each with commands.
	order, err := b.client.Start(ctx, OrderArgs{ID: "o", Cents: []int64{1, 2, 3}}, nil)
	require.NoError(t, err)
	receipt, err := getWithin[Receipt](ctx, t, order)
	require.NoError(t, err)
	require.Equal(t, int64(6), receipt.Total)
	rows, withBoundary := rowsOf(order.RunID)
	require.Equal(t, 4, withBoundary)
	require.Equal(t, 8, rows)
	require.Len(t, historyOf(t, b, order.WorkflowID, order.RunID), 12)

	// A run whose tasks wait on signals: tasks without commands, and its
	// last one completes it.
	sum, err := b.client.Start(ctx, SumArgs{TimeoutSeconds: 3600}, nil)
	require.NoError(t, err)
	require.NoError(t, b.client.Signal(ctx, sum.WorkflowID, uuid.Nil, AddSignal{N: 1}, nil))
	requireEventually(t, func() bool {
		var got int
		require.NoError(t, b.client.Query(ctx, sum.WorkflowID, uuid.Nil, SumQuery{}, &got, nil))
		return got == 1
	})
	require.NoError(t, b.client.Signal(ctx, sum.WorkflowID, uuid.Nil, AddSignal{N: 2}, nil))
	require.NoError(t, b.client.Signal(ctx, sum.WorkflowID, uuid.Nil, DoneSignal{}, nil))
	got, err := getWithin[int](ctx, t, sum)
	require.NoError(t, err)
	require.Equal(t, 3, got)
	events := historyOf(t, b, sum.WorkflowID, sum.RunID)
	require.Equal(t, client.EventType("WorkflowCompleted"), events[len(events)-1].Type)
	require.Equal(t, client.EventType("WorkflowTaskStarted"), events[len(events)-2].Type)
	rows, withBoundary = rowsOf(sum.RunID)
	require.Positive(t, withBoundary, "the run's last task folded its boundary")
	require.Equal(t, len(events), rows+withBoundary)

	replayer, err := worker.NewReplayer(&worker.ReplayerConfig{Pool: b.pool, Schema: b.schema})
	require.NoError(t, err)
	worker.AddReplayerWorkflow(replayer, &SumWorkflow{})
	worker.AddReplayerWorkflow(replayer, &SequentialWorkflow{})
	for _, run := range []*client.Run{sum, order} {
		res, err := replayer.ReplayRun(ctx, run.WorkflowID, run.RunID)
		require.NoError(t, err, "replaying %s", run.WorkflowID)
		require.True(t, res.Closed)
	}
}

// historyOf reads a run's history three ways (History two events a page,
// the replayer's loader, the weir_history view), requires them to agree and
// its IDs to be 1, 2, 3… and returns it.
func historyOf(t *testing.T, b *testBundle, workflowID string, runID uuid.UUID) []*client.Event {
	t.Helper()
	ctx := t.Context()
	var paged []*client.Event
	after := int64(0)
	for {
		page, err := b.client.History(ctx, workflowID, runID, &client.HistoryOpts{AfterEventID: after, Limit: 2})
		require.NoError(t, err)
		paged = append(paged, page.Events...)
		if page.NextAfterEventID == 0 {
			break
		}
		after = page.NextAfterEventID
	}
	for i, e := range paged {
		require.Equal(t, int64(i+1), e.ID)
	}

	replayer, err := worker.NewReplayer(&worker.ReplayerConfig{Pool: b.pool, Schema: b.schema})
	require.NoError(t, err)
	loaded, err := replayer.LoadHistory(ctx, workflowID, runID)
	require.NoError(t, err)
	require.Equal(t, paged, loaded)

	rows, err := b.pool.Query(ctx, "SELECT event_id, type, attributes, created_at FROM "+b.names.History+" WHERE run_id = $1 ORDER BY event_id", runID)
	require.NoError(t, err)
	defer rows.Close()
	var viewed []*client.Event
	for rows.Next() {
		var e client.Event
		require.NoError(t, rows.Scan(&e.ID, &e.Type, &e.Attributes, &e.Time))
		viewed = append(viewed, &e)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, paged, viewed)
	return paged
}
