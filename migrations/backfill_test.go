package migrations_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
)

// Weir 006 adds weir_backfill; its down step drops it, and up brings it back.
func TestWeirBackfillUpDown(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, schema := dbtest.Pool(ctx, t), dbtest.EmptySchema(ctx, t)
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	require.NoError(t, err)

	_, err = migrator.Up(ctx, nil)
	require.NoError(t, err)
	require.Contains(t, tableNames(ctx, t, pool, schema), "weir_backfill")
	require.Contains(t, migrations.TruncateTables(migrations.LineWeir, 0), "weir_backfill")
	require.NotContains(t, migrations.TruncateTables(migrations.LineWeir, 5), "weir_backfill")

	res, err := migrator.Down(ctx, &migrations.DownOpts{Line: migrations.LineWeir, TargetVersion: 5})
	require.NoError(t, err)
	require.Len(t, res.Versions, 1)
	require.Equal(t, 6, res.Versions[0].Version)
	require.NotContains(t, tableNames(ctx, t, pool, schema), "weir_backfill")

	_, err = migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineWeir})
	require.NoError(t, err)
	require.Contains(t, tableNames(ctx, t, pool, schema), "weir_backfill")
	require.NoError(t, migrator.Verify(ctx))
}
