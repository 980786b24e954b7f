package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
)

// runsOfWorkflowIDPrefix counts the runs whose workflow ID starts with prefix.
func runsOfWorkflowIDPrefix(ctx context.Context, t *testing.T, b *testBundle, prefix string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.Run+" WHERE starts_with(workflow_id, $1)", prefix).Scan(&n))
	return n
}

// Every schedule mutation has a Tx twin whose effect stands or falls with
// the caller's transaction.
func TestScheduleMutationsTx(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t, nil)
	c := b.client
	params := &client.ScheduleParams{ID: "tx", Cron: "@hourly", Paused: true, Workflow: orderArgs{ID: "o-tx"}}

	// rolledBack runs f in a transaction that rolls back.
	rolledBack := func(f func(tx pgx.Tx)) {
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }() // also when f fails the test
		f(tx)
	}

	rolledBack(func(tx pgx.Tx) {
		s, err := c.CreateScheduleTx(ctx, tx, params)
		require.NoError(t, err)
		require.Equal(t, "order", s.WorkflowKind)
		// A taken ID is refused and leaves the transaction usable.
		_, err = c.CreateScheduleTx(ctx, tx, params)
		require.ErrorIs(t, err, client.ErrScheduleExists)
		_, err = c.DescribeSchedule(ctx, "tx")
		require.ErrorIs(t, err, client.ErrScheduleNotFound, "not visible before commit")
		_, err = c.TriggerScheduleTx(ctx, tx, "tx")
		require.NoError(t, err, "the transaction is still usable")
	})
	_, err := c.DescribeSchedule(ctx, "tx")
	require.ErrorIs(t, err, client.ErrScheduleNotFound, "rolled back")
	require.Zero(t, runsOfWorkflowIDPrefix(ctx, t, b, "tx/"))

	_, err = c.CreateSchedule(ctx, params)
	require.NoError(t, err)

	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rolledBack(func(tx pgx.Tx) {
		run, err := c.TriggerScheduleTx(ctx, tx, "tx")
		require.NoError(t, err)
		require.True(t, run.Created)
		runs, err := c.BackfillScheduleTx(ctx, tx, "tx", from, from.Add(3*time.Hour))
		require.NoError(t, err)
		require.Len(t, runs, 3)
		require.Equal(t, client.ScheduleWorkflowID("tx", from), runs[0].WorkflowID)
		require.NoError(t, c.DeleteScheduleTx(ctx, tx, "tx"))
		require.ErrorIs(t, c.DeleteScheduleTx(ctx, tx, "tx"), client.ErrScheduleNotFound)
	})
	require.Zero(t, runsOfWorkflowIDPrefix(ctx, t, b, "tx/"), "no run started")
	_, err = c.DescribeSchedule(ctx, "tx")
	require.NoError(t, err, "not deleted")

	// Committed, the same calls take effect.
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := c.TriggerScheduleTx(ctx, tx, "tx"); err != nil {
			return err
		}
		_, err := c.BackfillScheduleTx(ctx, tx, "tx", from, from.Add(2*time.Hour))
		return err
	})
	require.NoError(t, err)
	require.Equal(t, 3, runsOfWorkflowIDPrefix(ctx, t, b, "tx/"))
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return c.DeleteScheduleTx(ctx, tx, "tx") }))
	_, err = c.DescribeSchedule(ctx, "tx")
	require.ErrorIs(t, err, client.ErrScheduleNotFound)

	for name, call := range map[string]func(tx pgx.Tx) error{
		"Trigger": func(tx pgx.Tx) error { _, err := c.TriggerScheduleTx(ctx, tx, "nosuch"); return err },
		"Backfill": func(tx pgx.Tx) error {
			_, err := c.BackfillScheduleTx(ctx, tx, "nosuch", from, from.Add(time.Hour))
			return err
		},
		"Delete": func(tx pgx.Tx) error { return c.DeleteScheduleTx(ctx, tx, "nosuch") },
	} {
		require.ErrorIs(t, pgx.BeginFunc(ctx, b.pool, call), client.ErrScheduleNotFound, name)
	}
}
