package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
)

// TestWeirLineUpDown: the weir line's one version creates the final schema
// directly (every table, the history view, the boundary column, weir_run's
// fill factor, no index on weir_run's updated_at), and its down step
// removes everything it created and nothing else; up brings it back.
func TestWeirLineUpDown(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema, migrator := dbtest.SchemaAt(ctx, t, migrations.LineWeir, -1)
	without := relations(ctx, t, pool, schema)
	require.Contains(t, without, "river_job")

	res, err := migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineWeir})
	require.NoError(t, err)
	require.Len(t, res.Versions, 1)
	require.Equal(t, 1, res.Versions[0].Version)
	require.NoError(t, migrator.Verify(ctx))
	requireFinalSchema(ctx, t, pool, schema)
	with := relations(ctx, t, pool, schema)
	for _, table := range migrations.TruncateTables(migrations.LineWeir, 0) {
		require.Contains(t, with, table)
		require.NotContains(t, without, table)
	}
	require.Contains(t, with, "weir_history")

	res, err = migrator.Down(ctx, &migrations.DownOpts{Line: migrations.LineWeir, TargetVersion: -1})
	require.NoError(t, err)
	require.Len(t, res.Versions, 1)
	require.Equal(t, without, relations(ctx, t, pool, schema), "down removes what up created, and only that")

	_, err = migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineWeir})
	require.NoError(t, err)
	require.Equal(t, with, relations(ctx, t, pool, schema))
	requireFinalSchema(ctx, t, pool, schema)
}

// requireFinalSchema checks what later versions used to add or change.
func requireFinalSchema(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	columns := "SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2"
	require.Contains(t, queryStrings(ctx, t, pool, columns, schema, "weir_event"), "boundary")
	require.Contains(t, queryStrings(ctx, t, pool, columns, schema, "weir_history"), "event_id")
	require.Equal(t, []string{"fillfactor=80"}, queryStrings(ctx, t, pool,
		"SELECT unnest(reloptions) FROM pg_class WHERE oid = to_regclass($1)", pgx.Identifier{schema, "weir_run"}.Sanitize()))
	indexes := queryStrings(ctx, t, pool, "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'weir_run'", schema)
	require.NotEmpty(t, indexes)
	for _, def := range indexes {
		require.NotContains(t, def, "updated_at", "a task's write to its run stays a HOT update")
	}
}

// relations lists every relation of schema (tables, views, indexes,
// sequences), sorted.
func relations(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	return queryStrings(ctx, t, pool, "SELECT relname::text FROM pg_class WHERE relnamespace = to_regnamespace($1) ORDER BY relname", schema)
}

func queryStrings(ctx context.Context, t *testing.T, pool *pgxpool.Pool, sql string, args ...any) []string {
	t.Helper()
	rows, err := pool.Query(ctx, sql, args...)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}
