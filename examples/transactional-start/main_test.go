package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestTransactionalStart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	// dbtest reuses schemas, truncating weir's tables only: drop the
	// example's own table.
	t.Cleanup(func() {
		_, err := pool.Exec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS "`+schema+`".orders`)
		require.NoError(t, err)
	})

	var out bytes.Buffer
	require.NoError(t, run(ctx, pool, schema, &out, "o-1"))
	require.Equal(t, `order o-1: row inserted and workflow fulfill-o-1 started in one transaction, committed
order o-1-rb: row inserted and workflow started, then the transaction rolled back (payment declined after the order was written)
order o-1: workflow completed, order fulfilled
order o-1-rb: 0 order rows, no workflow run
`, out.String())

	var status string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM "`+schema+`".orders WHERE id = 'o-1'`).Scan(&status))
	require.Equal(t, "fulfilled", status)
}
