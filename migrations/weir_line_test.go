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
// fill factor, no index on weir_run's updated_at, no foreign key to
// weir_run), and its down step
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
	require.Equal(t, []string{"fillfactor=50"}, queryStrings(ctx, t, pool,
		"SELECT unnest(reloptions) FROM pg_class WHERE oid = to_regclass($1)", pgx.Identifier{schema, "weir_run"}.Sanitize()))
	indexes := queryStrings(ctx, t, pool, "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'weir_run'", schema)
	require.NotEmpty(t, indexes)
	for _, def := range indexes {
		require.NotContains(t, def, "updated_at", "a task's write to its run stays a HOT update")
	}
	run := pgx.Identifier{schema, "weir_run"}.Sanitize()
	require.Empty(t, queryStrings(ctx, t, pool, "SELECT conrelid::regclass::text FROM pg_constraint WHERE contype = 'f' AND confrelid = to_regclass($1)", run),
		"no foreign key locks a run for its rows (decision 0031)")
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

// TestWeirRunAdvanceStaysOnPage: weir_run's fill factor leaves every row of
// a full page room for one more version of itself on that page, with no
// pruning at all (an old snapshot keeps every version alive), so a workflow
// task's write to its run (next_event_id, updated_at) is a HOT update even
// when all the page's runs advance at once, as in a burst of starts.
func TestWeirRunAdvanceStaysOnPage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.FreshSchema(ctx, t)
	runs, workflows := pgx.Identifier{schema, "weir_run"}.Sanitize(), pgx.Identifier{schema, "weir_workflow"}.Sanitize()
	const n = 200 // several pages of runs
	_, err := pool.Exec(ctx, `INSERT INTO `+workflows+` (namespace, workflow_id)
		SELECT 'default', 'wf-' || i FROM generate_series(1, $1) AS i`, n)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO `+runs+` (run_id, namespace, workflow_id, generation, kind, queue, args,
			request_id, request_hash, task_job_id)
		SELECT gen_random_uuid(), 'default', 'wf-' || i, 1, 'ThreeSteps', 'default', convert_to('{"Input":' || i || '}', 'UTF8'),
			gen_random_uuid()::text, sha256(i::text::bytea), i
		FROM generate_series(1, $1) AS i`, n)
	require.NoError(t, err)

	// A snapshot taken before the writes: no version they leave dead can be
	// pruned while it is open.
	old, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = old.Rollback(ctx) }()
	var count int
	require.NoError(t, old.QueryRow(ctx, "SELECT count(*) FROM "+runs).Scan(&count))
	require.Equal(t, n, count)

	var moved int
	require.NoError(t, pool.QueryRow(ctx, `WITH before AS (SELECT run_id, (ctid::text::point)[0] AS page FROM `+runs+`),
		advanced AS (UPDATE `+runs+` r SET next_event_id = r.next_event_id + 2, updated_at = now()
			RETURNING r.run_id, (r.ctid::text::point)[0] AS page)
		SELECT count(*) FROM advanced a JOIN before b USING (run_id) WHERE a.page <> b.page`).Scan(&moved))
	require.Zero(t, moved, "every run's new version stays on its page")
}
