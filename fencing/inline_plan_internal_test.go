package fencing

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
)

// TestBatchStatementsTakeJobsByKey: the Pilot's state write and the lease
// keeper's renewal, for a batch of thousands of jobs on a river_job of tens
// of thousands, take the jobs by key in the plan Postgres makes for that call
// (a custom plan, which sees the arrays' lengths): no scan of all of
// river_job, and an estimate below Postgres's default jit_above_cost (a plan
// estimated above it is JIT-compiled on every call).
//
// Joined to the writes on id alone, the state write may hash-join its batch
// against a scan of all of river_job; a renewal that tests its leases with
// select-list EXISTS subqueries over the batch's IDs is costed past the JIT
// thresholds (docs/decisions/0004).
func TestBatchStatementsTakeJobsByKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.FreshSchema(ctx, t)

	// Running jobs and some completed ones (which the renewal tells apart).
	const running, completed, batch = 25_000, 5_000, 2_000
	table := tableName(schema, "river_job")
	_, err := pool.Exec(ctx, `INSERT INTO `+table+` (args, kind, max_attempts, state, attempt, attempted_at, attempted_by)
        SELECT '{}', 'plan', 25, 'running', 1, now(), '{plan}' FROM generate_series(1, $1)`, running)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO `+table+` (args, kind, max_attempts, state, attempt, attempted_at, attempted_by, finalized_at)
        SELECT '{}', 'plan', 25, 'completed', 1, now(), '{plan}', now() FROM generate_series(1, $1)`, completed)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "ANALYZE "+table)
	require.NoError(t, err)

	rows, err := pool.Query(ctx, "SELECT id FROM "+table+" WHERE state = 'running' ORDER BY id LIMIT $1", batch)
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

	// Postgres's default jit_above_cost, whatever this server's settings.
	const jitAboveCost = 100_000
	totalCost := regexp.MustCompile(`cost=[0-9.]+\.\.([0-9.]+)`)
	for _, tc := range []struct {
		name string
		sql  string
		args []any
	}{
		{"Renew", renewSQL(schema), []any{ids, tokens, until, 30 * time.Second, until, 5 * time.Second}},
		{"SetState", setStateInlineSQL(schema, false), setStateInlineArgs(params, proofs)},
		// QueueCompletions's statement for many, at a group's size.
		{"CompleteClaimedMany", completeClaimedManySQL(schema), []any{16, ids[:16], tokens[:16], make([]int, 16), make([]time.Time, 16), make([]*string, 16)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := pool.Query(ctx, "EXPLAIN "+tc.sql, tc.args...)
			require.NoError(t, err)
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			for i, line := range lines {
				if j := strings.Index(line, "'{"); j >= 0 { // the arrays' values
					lines[i] = line[:j] + "'{...}'"
				}
			}
			plan := strings.Join(lines, "\n")
			require.NotContains(t, plan, "Seq Scan on river_job", "the plan scans all of river_job:\n%s", plan)
			m := totalCost.FindStringSubmatch(lines[0])
			require.NotNil(t, m, "no cost in the plan's first line:\n%s", plan)
			cost, err := strconv.ParseFloat(m[1], 64)
			require.NoError(t, err)
			require.Less(t, cost, float64(jitAboveCost), "the plan's estimate would make Postgres JIT-compile it:\n%s", plan)
		})
	}
}

// TestBatchStatementsPlannedYoung: the claimed jobs' completion
// (completeClaimedManySQL, which a weir worker's group of steps sends) and
// the lease keeper's renewal, planned generically on a river_job whose
// statistics were taken while few jobs ran, take their jobs by primary key.
//
// A WHERE that tests state = 'running', which river_job's fetching index
// (state first) serves, lets a generic plan made with statistics saying
// almost no job runs read every running job through that index and filter
// them by ID (docs/decisions/0004).
func TestBatchStatementsPlannedYoung(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.FreshSchema(ctx, t)
	table := tableName(schema, "river_job")
	insert := func(n int, state string) {
		t.Helper()
		_, err := pool.Exec(ctx, `INSERT INTO `+table+` (args, kind, max_attempts, state, attempt, attempted_at, attempted_by, finalized_at)
        SELECT '{}', 'plan', 25, $2::text::`+tableName(schema, "river_job_state")+`, 1, now(), '{plan}', CASE WHEN $2::text = 'running' THEN NULL ELSE now() END
        FROM generate_series(1, $1)`, n, state)
		require.NoError(t, err)
	}
	// Analyzed when the table held finished jobs only, as after a quiet
	// spell; then a burst's jobs run.
	insert(1_000, "completed")
	_, err := pool.Exec(ctx, "ANALYZE "+table)
	require.NoError(t, err)
	insert(20_000, "running")

	for _, tc := range []struct {
		name, settings, sql, args string
	}{
		// As a weir worker's group sends it.
		{"CompleteClaimedMany", dbschema.GenericPlansSQL + "; " + dbschema.HashJoinsSQL, completeClaimedManySQL(schema), "3, '{1,2,3}', '{a,b,c}', '{1,1,1}', '{2026-01-01,2026-01-01,2026-01-01}', '{NULL,NULL,NULL}'"},
		{"Renew", "SET LOCAL plan_cache_mode = force_generic_plan", renewSQL(schema), "'{1,2,3}', '{a,b,c}', '{NULL,NULL,NULL}', '30 seconds', '{NULL,NULL,NULL}', '5 seconds'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := dbtest.ExplainPrepared(ctx, t, pool, tc.settings, tc.sql, tc.args)
			require.NotContains(t, plan, "'{", "a generic plan, its parameters unbound:\n%s", plan)
			scans := dbtest.PlanScans(plan)
			require.NotEmpty(t, scans, "the plan reads no job:\n%s", plan)
			if strings.Contains(tc.settings, dbschema.HashJoinsSQL) {
				require.Empty(t, dbtest.FilteredLoops(plan), "a batch joined row by row:\n%s", plan)
			}
			for _, scan := range scans {
				require.Equal(t, "river_job_pkey", scan.Index, "%s does not take jobs by key:\n%s", scan.Line, plan)
				require.NotEmpty(t, scan.Cond, "%s reads all of its index:\n%s", scan.Line, plan)
			}
		})
	}
}
