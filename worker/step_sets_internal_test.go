package worker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
)

// TestMergeGroupWrites: the members' events, retirements, activity records
// and plain CASes become one statement each, in the place of the first, with every
// member's rows; anything else keeps its place and order, and a CAS that
// clears a task job, or a kind that occurs once, is left alone.
func TestMergeGroupWrites(t *testing.T) {
	t.Parallel()
	w := &Worker{sql: newStepSQL(dbschema.New("s"))}
	a, b := uuid.New(), uuid.New()
	now := time.Now()
	one := int64(1)
	batch := &pgx.Batch{}
	batch.Queue(w.sql.events, a, []int64{4, 5}, []string{"x", "y"}, []string{"{}", "{}"}, []*int64{&one, nil}, []time.Time{now, now})
	batch.Queue(w.sql.retireOne, a, int64(1))
	batch.Queue("SELECT 'claim of a'")
	deadline := now.Add(time.Hour)
	batch.Queue(w.sql.activity, a, int64(6), int64(100), "act", &deadline)
	batch.Queue(w.sql.advance, a, int64(4), int64(6), int64(0))
	batch.Queue(w.sql.events, b, []int64{9}, []string{"z"}, []string{"{}"}, []*int64{nil}, []time.Time{now})
	batch.Queue(w.sql.retireOne, b, int64(7))
	batch.Queue(w.sql.activity, b, int64(10), int64(101), "act", (*time.Time)(nil))
	batch.Queue(w.sql.advance, b, int64(9), int64(10), int64(0))
	batch.Queue(w.sql.advance, uuid.New(), int64(1), int64(2), int64(33)) // clears its task: left alone
	c, d := uuid.New(), uuid.New()
	batch.Queue(w.sql.complete, c, int64(7), int64(9), []byte("1"))
	batch.Queue(w.sql.complete, d, int64(8), int64(10), []byte(nil))
	batch.Queue(w.sql.abandon, c, []byte(`{"m":1}`), "ch")
	batch.Queue(w.sql.abandon, d, []byte(`{"m":1}`), "ch")
	batch.Queue(w.sql.abandon, a, []byte(`{"m":2}`), "ch") // another failure: left alone
	batch.Queue("SELECT 'last'")

	w.mergeGroupWrites(batch)
	var sqls []string
	for _, qq := range batch.QueuedQueries {
		sqls = append(sqls, qq.SQL)
	}
	require.Equal(t, []string{w.sql.eventsMerged, w.sql.retireOneMerged, "SELECT 'claim of a'", w.sql.activityMerged, w.sql.advanceMerged,
		w.sql.advance, w.sql.completeMerged, w.sql.abandonMerged, w.sql.abandon, "SELECT 'last'"}, sqls)
	q := batch.QueuedQueries
	require.Equal(t, []any{[]uuid.UUID{a, a, b}, []int64{4, 5, 9}, []string{"x", "y", "z"}, []string{"{}", "{}", "{}"},
		[]*int64{&one, nil, nil}, []time.Time{now, now, now}}, q[0].Arguments)
	require.Equal(t, []any{[]uuid.UUID{a, b}, []int64{1, 7}}, q[1].Arguments)
	require.Equal(t, []any{[]uuid.UUID{a, b}, []int64{6, 10}, []int64{100, 101}, []string{"act", "act"}, []*time.Time{&deadline, nil}}, q[3].Arguments)
	require.Equal(t, []any{[]uuid.UUID{a, b}, []int64{4, 9}, []int64{6, 10}, 2}, q[4].Arguments)
	require.NotNil(t, q[4].Fn, "the merged CAS reads its check")
	require.Equal(t, []any{[]uuid.UUID{c, d}, []int64{7, 8}, []int64{9, 10}, [][]byte{[]byte("1"), nil}, 2}, q[6].Arguments)
	require.NotNil(t, q[6].Fn)
	require.Equal(t, []any{[]uuid.UUID{c, d}, []byte(`{"m":1}`), "ch"}, q[7].Arguments)

	// A member that folded a boundary and one that did not: one
	// folded statement, the other's rows without a boundary.
	boundary := `{"attempt":1}`
	mixed := &pgx.Batch{}
	mixed.Queue(w.sql.events, a, []int64{4}, []string{"x"}, []string{"{}"}, []*int64{nil}, []time.Time{now})
	mixed.Queue(w.sql.eventsFolded, b, []int64{8, 9}, []string{"y", "z"}, []string{"{}", "{}"}, []*int64{&one, nil}, []time.Time{now, now},
		[]*string{nil, &boundary})
	mixed.Queue(w.sql.events, c, []int64{2}, []string{"w"}, []string{"{}"}, []*int64{nil}, []time.Time{now})
	w.mergeGroupWrites(mixed)
	require.Len(t, mixed.QueuedQueries, 1)
	require.Equal(t, w.sql.eventsFoldedMerged, mixed.QueuedQueries[0].SQL)
	require.Equal(t, []any{[]uuid.UUID{a, b, b, c}, []int64{4, 8, 9, 2}, []string{"x", "y", "z", "w"}, []string{"{}", "{}", "{}", "{}"},
		[]*int64{nil, &one, nil, nil}, []time.Time{now, now, now, now}, []*string{nil, nil, &boundary, nil}}, mixed.QueuedQueries[0].Arguments)

	single := &pgx.Batch{}
	single.Queue(w.sql.events, a, []int64{4}, []string{"x"}, []string{"{}"}, []*int64{nil}, []time.Time{now})
	single.Queue(w.sql.advance, a, int64(4), int64(5), int64(0))
	w.mergeGroupWrites(single)
	require.Equal(t, w.sql.events, single.QueuedQueries[0].SQL, "one member: as it was")
	require.Equal(t, w.sql.advance, single.QueuedQueries[1].SQL)
}

// TestMergedGroupWrites: on tables of tens of thousands of runs whose
// statistics were taken nearly empty, the merged statements (and the
// group's lock of its runs) take their rows
// by key (no scan of the table, whose custom plans could join the arrays
// against one), write every member's rows, and the merged CAS fails, in the
// database, when one run's append point moved.
func TestMergedGroupWrites(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.FreshSchema(ctx, t)
	names := dbschema.New(schema)
	sql := newStepSQL(names)

	_, err := pool.Exec(ctx, "INSERT INTO "+names.Namespace+" (name) VALUES ('default') ON CONFLICT DO NOTHING")
	require.NoError(t, err)
	fill := func(from, to int) {
		t.Helper()
		_, err := pool.Exec(ctx, "INSERT INTO "+names.Workflow+" (namespace, workflow_id, last_generation)"+
			" SELECT 'default', 'wf-' || i, 1 FROM generate_series($1::int, $2::int) i", from, to)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "INSERT INTO "+names.Run+
			" (run_id, namespace, workflow_id, generation, kind, queue, args, request_id, request_hash, next_event_id)"+
			" SELECT gen_random_uuid(), 'default', 'wf-' || i, 1, 'k', 'default', '\\x', 'r' || i, '\\x', 4"+
			" FROM generate_series($1::int, $2::int) i", from, to)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "INSERT INTO "+names.Activity+" (run_id, scheduled_event_id, job_id, kind)"+
			" SELECT run_id, 3, 1, 'act' FROM "+names.Run+" r WHERE NOT EXISTS (SELECT 1 FROM "+names.Activity+" a WHERE a.run_id = r.run_id)")
		require.NoError(t, err)
	}
	fill(1, 10)
	_, err = pool.Exec(ctx, "ANALYZE "+names.Run+"; ANALYZE "+names.Activity)
	require.NoError(t, err)
	fill(11, 30000)

	var runs []uuid.UUID
	rows, err := pool.Query(ctx, "SELECT run_id FROM "+names.Run+" ORDER BY run_id LIMIT 5")
	require.NoError(t, err)
	runs, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	found, next, scheduled := []int64{4, 4, 4, 4, 4}, []int64{6, 6, 6, 6, 6}, []int64{3, 3, 3, 3, 3}

	// Custom plans, and the generic ones a group asks for (dbschema.GenericPlansSQL):
	// each statement prepared, then explained executing with literals.
	uuids := "'{" + strings.Trim(strings.Join(strings.Fields(fmt.Sprint(runs)), ","), "[]") + "}'"
	for _, generic := range []bool{false, true} {
		settings := ""
		if generic {
			settings = dbschema.GenericPlansSQL
		}
		explain := func(query, literals string) string {
			t.Helper()
			return dbtest.ExplainPrepared(ctx, t, pool, settings, query, literals)
		}
		for _, plan := range []string{
			explain((&Worker{names: names}).lockRunsSQL(), uuids),
			explain(sql.advanceMerged, uuids+", '{4,4,4,4,4}', '{6,6,6,6,6}', 5"),
			explain(sql.completeMerged, uuids+", '{4,4,4,4,4}', '{6,6,6,6,6}', '{NULL,NULL,NULL,NULL,NULL}', 5"),
			explain(sql.retireOneMerged, uuids+", '{3,3,3,3,3}'"),
		} {
			require.NotContains(t, plan, "Seq Scan on weir_run", "generic %v:\n%s", generic, plan)
			require.NotContains(t, plan, "Seq Scan on weir_activity", "generic %v:\n%s", generic, plan)
			if generic {
				require.NotContains(t, plan, "'{", "a generic plan, its parameters unbound:\n%s", plan)
			} else {
				require.Contains(t, plan, "'{", "a custom plan:\n%s", plan)
			}
		}
	}

	// A moved append point: nothing of the statement stays.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, sql.advanceMerged, runs, []int64{4, 4, 3, 4, 4}, next, len(runs))
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, pgerrcode.DivisionByZero, pgErr.Code)
	require.NoError(t, tx.Rollback(ctx))

	now := time.Now()
	batch := &pgx.Batch{}
	batch.Queue(sql.eventsMerged, []uuid.UUID{runs[0], runs[0], runs[1]}, []int64{4, 5, 4}, []string{"a", "b", "c"},
		[]string{"{}", "{}", "{}"}, []*int64{nil, nil, nil}, []time.Time{now, now, now})
	boundary := `{"attempt": 1}`
	batch.Queue(sql.eventsFoldedMerged, []uuid.UUID{runs[4], runs[4]}, []int64{4, 6}, []string{"a", "ActivityScheduled"},
		[]string{"{}", "{}"}, []*int64{nil, nil}, []time.Time{now, now}, []*string{nil, &boundary})
	batch.Queue(sql.retireOneMerged, runs[:2], scheduled[:2])
	batch.Queue(sql.advanceMerged, runs[:2], found[:2], []int64{6, 5}, 2)
	batch.Queue(sql.completeMerged, runs[2:4], found[2:4], []int64{7, 7}, [][]byte{[]byte("42"), nil}, 2)
	require.NoError(t, pool.SendBatch(ctx, batch).Close())
	var completed int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+names.Run+" WHERE run_id = ANY($1) AND state = 'completed'"+
		" AND closed_at IS NOT NULL AND next_event_id = 7 AND result IS NOT DISTINCT FROM CASE WHEN run_id = $2 THEN '42'::bytea END",
		runs[2:4], runs[2]).Scan(&completed))
	require.Equal(t, 2, completed)

	_, err = pool.Exec(ctx, "INSERT INTO "+names.Update+" (run_id, update_id, kind) VALUES ($1, 'u1', 'k'), ($2, 'u2', 'k'), ($3, 'u3', 'k')",
		runs[2], runs[3], runs[4])
	require.NoError(t, err)
	_, err = pool.Exec(ctx, sql.abandonMerged, runs[2:4], []byte(`{"message":"closed"}`), "ch")
	require.NoError(t, err)
	var rejected int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE state = 'rejected' AND run_id = ANY($1))"+
		" + 10 * count(*) FILTER (WHERE state = 'requested') FROM "+names.Update, runs[2:4]).Scan(&rejected))
	require.Equal(t, 12, rejected, "the two runs' updates rejected, the third's still pending")
	var events, retired, advanced int
	require.NoError(t, pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+names.History+"),"+
		" (SELECT count(*) FROM "+names.Activity+" WHERE run_id = ANY($1)),"+
		" (SELECT count(*) FROM "+names.Run+" WHERE run_id = ANY($1) AND next_event_id = CASE WHEN run_id = $2 THEN 6 ELSE 5 END)",
		runs[:2], runs[0]).Scan(&events, &retired, &advanced))
	require.Equal(t, 6, events, "three rows, then two rows with a boundary folded into one of them")
	require.Zero(t, retired)
	require.Equal(t, 2, advanced)
}

// TestGroupPlansMadeYoung: a group's statements planned on a new install's
// empty tables (generic plans, made once per connection: dbschema.GenericPlansSQL)
// still take their rows by key once the tables filled, since the plans
// made then stay cached on the connection until an ANALYZE. Without
// sequential scans off in dbschema.GenericPlansSQL, the plans made on the empty
// tables scan them, and go on scanning them full.
func TestGroupPlansMadeYoung(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.FreshSchema(ctx, t)
	names := dbschema.New(schema)
	sql := newStepSQL(names)

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	statements := []struct{ query, literals string }{
		{(&Worker{names: names}).lockRunsSQL(), "'{00000000-0000-4000-8000-000000000001}'"},
		{sql.advanceMerged, "'{00000000-0000-4000-8000-000000000001}', '{4}', '{6}', 1"},
		{sql.completeMerged, "'{00000000-0000-4000-8000-000000000001}', '{4}', '{6}', '{NULL}', 1"},
		{sql.retireOneMerged, "'{00000000-0000-4000-8000-000000000001}', '{3}'"},
	}
	// explain explains the prepared statements, each planned (the first
	// time) or taken from the connection's cache (after), in a transaction
	// as a group's.
	explain := func(when string) {
		t.Helper()
		for i, s := range statements {
			plan := dbtest.ExplainExecute(ctx, t, conn.Conn(), dbschema.GenericPlansSQL, fmt.Sprintf("young_%d", i), s.literals)
			require.NotContains(t, plan, "Seq Scan on weir_run", "%s:\n%s", when, plan)
			require.NotContains(t, plan, "Seq Scan on weir_activity", "%s:\n%s", when, plan)
			require.NotContains(t, plan, "'{", "a generic plan, its parameters unbound:\n%s", plan)
		}
	}
	for i, s := range statements {
		_, err := conn.Exec(ctx, fmt.Sprintf("PREPARE young_%d AS %s", i, s.query))
		require.NoError(t, err)
	}
	explain("planned on the empty tables")

	_, err = pool.Exec(ctx, "INSERT INTO "+names.Namespace+" (name) VALUES ('default') ON CONFLICT DO NOTHING")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+names.Workflow+" (namespace, workflow_id, last_generation)"+
		" SELECT 'default', 'wf-' || i, 1 FROM generate_series(1, 20000) i")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+names.Run+
		" (run_id, namespace, workflow_id, generation, kind, queue, args, request_id, request_hash, next_event_id)"+
		" SELECT gen_random_uuid(), 'default', 'wf-' || i, 1, 'k', 'default', '\\x', 'r' || i, '\\x', 4 FROM generate_series(1, 20000) i")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+names.Activity+" (run_id, scheduled_event_id, job_id, kind) SELECT run_id, 3, 1, 'act' FROM "+names.Run)
	require.NoError(t, err)
	explain("cached, the tables filled")
}
