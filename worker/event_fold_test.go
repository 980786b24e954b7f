package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
	"github.com/weirhq/weir/worker"
)

// TestBoundaryFoldingRollout runs workflows on a schema before weir 004
// (one row per event), migrates while a run waits, and lets it finish: the
// worker finds the boundary column on its next sweep, and from then on
// folds a task's boundary into its first command's row. The run's history,
// written in both shapes, reads and replays as one history, and every
// reader (paged History, the replayer, the weir_history view) sees the same
// events.
func TestBoundaryFoldingRollout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema, migrator := dbtest.SchemaAt(ctx, t, migrations.LineWeir, 3)
	c, err := client.New(pool, &client.Config{Schema: schema, PollInterval: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	b := &testBundle{charge: &ChargeActivity{}, client: c, names: dbschema.New(schema), pool: pool, schema: schema}
	// A worker of this build, started before the migration (its Start
	// would refuse the schema: this is the window of a rollout before the
	// migration ran).
	w, err := worker.New(pool, &worker.Config{Schema: schema, SweepInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	worker.AddWorkflow(w, &SumWorkflow{})
	worker.AddWorkflow(w, &SequentialWorkflow{})
	worker.AddActivity(w, b.charge)
	require.ErrorIs(t, w.Start(ctx), migrations.ErrSchemaBehind)
	require.NoError(t, worker.StartOnSchemaBehind(ctx, w))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
	})

	// Before the migration: a run that waits, with two tasks behind it.
	sum, err := c.Start(ctx, SumArgs{TimeoutSeconds: 3600}, nil)
	require.NoError(t, err)
	require.NoError(t, c.Signal(ctx, sum.WorkflowID, uuid.Nil, AddSignal{N: 1}, nil))
	requireEventually(t, func() bool {
		var got int
		require.NoError(t, c.Query(ctx, sum.WorkflowID, uuid.Nil, SumQuery{}, &got, nil))
		return got == 1
	})
	before := historyOf(t, b, sum.WorkflowID, sum.RunID)

	_, err = migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineWeir})
	require.NoError(t, err)

	// After it: a run of three activities folds every task's boundary once
	// the worker's sweeper has found the column.
	var order *client.Run
	requireEventually(t, func() bool {
		order, err = c.Start(ctx, OrderArgs{ID: "o", Cents: []int64{1, 2, 3}}, nil)
		require.NoError(t, err)
		receipt, err := client.GetResult[Receipt](ctx, order)
		require.NoError(t, err)
		require.Equal(t, int64(6), receipt.Total)
		var rows, withBoundary int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), count(boundary) FROM "+b.names.Event+" WHERE run_id = $1", order.RunID).
			Scan(&rows, &withBoundary))
		return withBoundary == 4 && rows == 8 // 12 events: 4 tasks, each with commands
	})
	orderHistory := historyOf(t, b, order.WorkflowID, order.RunID)
	require.Len(t, orderHistory, 12)

	// The waiting run finishes after the migration: its history is in both
	// shapes and reads as one.
	require.NoError(t, c.Signal(ctx, sum.WorkflowID, uuid.Nil, AddSignal{N: 2}, nil))
	require.NoError(t, c.Signal(ctx, sum.WorkflowID, uuid.Nil, DoneSignal{}, nil))
	got, err := client.GetResult[int](ctx, sum)
	require.NoError(t, err)
	require.Equal(t, 3, got)
	after := historyOf(t, b, sum.WorkflowID, sum.RunID)
	require.Equal(t, before, after[:len(before)], "the rows written before the migration read as they did")
	require.Equal(t, client.EventType("WorkflowCompleted"), after[len(after)-1].Type)
	require.Equal(t, client.EventType("WorkflowTaskStarted"), after[len(after)-2].Type)
	var sumFolded int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(boundary) FROM "+b.names.Event+" WHERE run_id = $1", sum.RunID).Scan(&sumFolded))
	require.Positive(t, sumFolded, "the run's last task folded its boundary")

	replayer, err := worker.NewReplayer(&worker.ReplayerConfig{Pool: pool, Schema: schema})
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
// its IDs to be 1, 2, 3… and returns it. Before weir 004 there is no view.
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

	var hasView bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", b.names.History).Scan(&hasView))
	if !hasView {
		return paged // before weir 004
	}
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
