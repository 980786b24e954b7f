package fencing

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
)

// TestBatchStatementsTakeJobsByKey: the Pilot's state write and the lease
// keeper's renewal, for a batch of thousands of jobs, do not scan all of
// river_job in the plan Postgres makes for that call (a custom plan, which
// sees the arrays' lengths), even when river_job's statistics are older and
// smaller than the table, as they are during a burn-down. Joined to the
// writes on id alone, the state write hash-joined a batch of 1,915 writes
// against a scan of a 30,000-job river_job (17 ms), about 9 µs of Postgres
// CPU per job in a burn-down of 100,000 jobs, growing with the table.
func TestBatchStatementsTakeJobsByKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.FreshSchema(ctx, t)

	// As in a burn-down: river_job was last analyzed when it was much
	// smaller than it is now (autovacuum off, so that it stays so).
	const analyzed, jobs, batch = 5_000, 30_000, 2_000
	table := tableName(schema, "river_job")
	_, err := pool.Exec(ctx, "ALTER TABLE "+table+" SET (autovacuum_enabled = false)")
	require.NoError(t, err)
	insert := func(n int) {
		_, err := pool.Exec(ctx, `INSERT INTO `+table+` (args, kind, max_attempts, state, attempt, attempted_at, attempted_by)
            SELECT '{}', 'plan', 25, 'running', 1, now(), '{plan}' FROM generate_series(1, $1)`, n)
		require.NoError(t, err)
	}
	insert(analyzed)
	_, err = pool.Exec(ctx, "ANALYZE "+table)
	require.NoError(t, err)
	insert(jobs - analyzed)

	rows, err := pool.Query(ctx, "SELECT id FROM "+table+" ORDER BY id LIMIT $1", batch)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)

	now := time.Now()
	params := &riverdriver.JobSetStateIfRunningManyParams{Schema: schema}
	proofs := make([]*proof, len(ids))
	tokens := make([]string, len(ids))
	until := make([]*time.Time, len(ids))
	for i, id := range ids {
		params.ID = append(params.ID, id)
		params.Attempt = append(params.Attempt, nil)
		params.ErrData = append(params.ErrData, nil)
		params.FinalizedAt = append(params.FinalizedAt, &now)
		params.MetadataDoMerge = append(params.MetadataDoMerge, false)
		params.MetadataUpdates = append(params.MetadataUpdates, nil)
		params.ScheduledAt = append(params.ScheduledAt, nil)
		params.State = append(params.State, rivertype.JobStateCompleted)
		tokens[i] = "00000000-0000-4000-8000-000000000000"
		proofs[i] = &proof{Attempt: 1, Token: tokens[i]}
	}

	plan := func(t *testing.T, sql string, args ...any) string {
		t.Helper()
		rows, err := pool.Query(ctx, "EXPLAIN "+sql, args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for i, line := range lines {
			if j := strings.Index(line, "'{"); j >= 0 { // the arrays' values
				lines[i] = line[:j] + "'{...}'"
			}
		}
		return strings.Join(lines, "\n")
	}
	for name, text := range map[string]string{
		"SetState": plan(t, setStateInlineSQL(schema, false), setStateInlineArgs(params, proofs)...),
		"Renew":    plan(t, renewSQL(schema), ids, tokens, until, 30*time.Second),
	} {
		t.Run(name, func(t *testing.T) {
			require.NotContains(t, text, "Seq Scan on river_job", "the plan scans all of river_job:\n%s", text)
		})
	}
}
