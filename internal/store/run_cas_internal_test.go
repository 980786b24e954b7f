package store

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
)

// TestRunCASTakesRunByKey: a task's write to its run, with a plan cached
// while weir_run (never analyzed) held a few runs, does not take the row
// through weir_run_live_idx once the table holds thousands of live runs, as
// in a burst of starts: that plan filtered every live run by run_id.
func TestRunCASTakesRunByKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.FreshSchema(ctx, t)

	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	_, err := pool.Exec(ctx, "ALTER TABLE "+table("weir_run")+" SET (autovacuum_enabled = false)")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+table("weir_namespace")+" (name) VALUES ('default') ON CONFLICT DO NOTHING")
	require.NoError(t, err)
	runs := func(from, to int) {
		t.Helper()
		_, err := pool.Exec(ctx, "INSERT INTO "+table("weir_workflow")+" (namespace, workflow_id, last_generation)"+
			" SELECT 'default', 'wf-' || i, 1 FROM generate_series($1::int, $2::int) i", from, to)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "INSERT INTO "+table("weir_run")+
			" (run_id, namespace, workflow_id, generation, kind, queue, args, request_id, request_hash)"+
			" SELECT gen_random_uuid(), 'default', 'wf-' || i, 1, 'k', 'default', '\\x', 'r' || i, '\\x'"+
			" FROM generate_series($1::int, $2::int) i", from, to)
		require.NoError(t, err)
	}

	// A worker's connection prepares the write while weir_run is nearly
	// empty, and Postgres keeps the plan it settles on (a generic plan,
	// after five calls) while the burst fills the table.
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	runs(1, 10)
	_, err = conn.Exec(ctx, "PREPARE run_cas (uuid, bigint, bigint) AS UPDATE "+table("weir_run")+
		" SET next_event_id = $3, updated_at = now()"+runCASWhere)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "DEALLOCATE run_cas") }()
	for range 6 {
		_, err = conn.Exec(ctx, "EXECUTE run_cas ('"+uuid.NewString()+"', 1, 2)")
		require.NoError(t, err)
	}
	runs(11, 2000)

	plan := dbtest.ExplainExecute(ctx, t, conn.Conn(), "", "run_cas", "'"+uuid.NewString()+"', 1, 2")
	// With statistics taken while the table was tiny, a sequential scan
	// would be the plan Postgres caches; what matters here is that the
	// partial index never is.
	require.NotContains(t, plan, "weir_run_live_idx", "the write takes the run through the index of live runs:\n%s", plan)
}
