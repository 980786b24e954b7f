package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestRiverUpgrade(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	// dbtest reuses schemas, truncating weir's tables only: drop the
	// example's own table.
	t.Cleanup(func() {
		_, err := pool.Exec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS "`+schema+`".invoices`)
		require.NoError(t, err)
	})

	var out bytes.Buffer
	require.NoError(t, run(ctx, pool, schema, &out, "o-7"))
	require.Equal(t, `step 1: the River client on the fencing driver (fencing active: true)
  email to ann@example.com: "Welcome"
  job send_email completed (attempt 1)
step 2: the same workers, orchestrated by a workflow
  email to ann@example.com: "Your invoice for order o-7"
  workflow billing-o-7: invoiced and emailed (invoice row: 4200 cents)
  email to bob@example.com: "Password reset"
  a job inserted directly still runs
`, out.String())
}
