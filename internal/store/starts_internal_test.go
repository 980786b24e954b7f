package store

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/task"
)

// TestStartRunManyTakesRunsByKey: on a runs table of tens of thousands of
// rows whose statistics were taken nearly empty, a group's lookup and insert
// (startRunSQL) reads runs by key only, in its custom plans and in its
// generic one (a worker's group asks for generic plans).
func TestStartRunManyTakesRunsByKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.FreshSchema(ctx, t)
	names := dbschema.New(schema)

	// Planned on a new install's empty tables, as a group plans it the
	// first time on a connection, which then keeps that plan until an
	// ANALYZE: it takes rows by key all the same (without sequential scans
	// off in dbschema.GenericPlansSQL, it scans weir_run).
	plan := dbtest.ExplainPrepared(ctx, t, pool, dbschema.GenericPlansSQL+"; "+dbschema.HashJoinsSQL, startRunSQL(names),
		"'{00000000-0000-0000-0000-000000000001}', '{default}', '{wf-1}', '{k}', '{default}', '{x}', '{r1}', '{h}', '{\"{}\"}', '{f}', '{f}',"+
			" '{t}', '{NULL}', '{0}', '{0}', '{NULL}', '{0}', '{t}'")
	requireByKey(t, plan, "planned on the empty tables")
	require.Empty(t, dbtest.FilteredLoops(plan), "a batch joined row by row:\n%s", plan)
	require.NotContains(t, plan, "'{", "a generic plan, its parameters unbound:\n%s", plan)

	insertRuns(t, pool, names, 1, 10)
	_, err := pool.Exec(ctx, "ANALYZE "+names.Run+"; ANALYZE "+names.Workflow)
	require.NoError(t, err)
	insertRuns(t, pool, names, 11, 30000)

	literals := "'{00000000-0000-0000-0000-000000000001,00000000-0000-0000-0000-000000000002,00000000-0000-0000-0000-000000000003}'," +
		" '{default,default,default}', '{wf-5,wf-20,wf-new}', '{k,k,k}', '{default,default,default}', '{x,y,z}'," +
		" '{r5,r99,r100}', '{h,h,h}', '{\"{}\",\"{}\",\"{}\"}', '{f,f,f}', '{f,t,f}'," +
		" '{t,t,t}', '{NULL,NULL,NULL}', '{0,0,0}', '{0,0,0}', '{NULL,NULL,NULL}', '{0,0,0}', '{f,f,t}'"
	for _, generic := range []bool{false, true} {
		settings := dbschema.HashJoinsSQL // as QueueStartRuns sends it
		if generic {
			settings = dbschema.GenericPlansSQL + "; " + dbschema.HashJoinsSQL
		}
		plan := dbtest.ExplainPrepared(ctx, t, pool, settings, startRunSQL(names), literals)
		requireByKey(t, plan, fmt.Sprintf("generic %v", generic))
		if generic {
			require.NotContains(t, plan, "'{", "a generic plan, its parameters unbound:\n%s", plan)
			require.Empty(t, dbtest.FilteredLoops(plan), "a batch joined row by row:\n%s", plan)
		}
	}

	// Executed: the live run (wf-20) and the completed one a policy refuses
	// (wf-5, its request unknown) are found, and only the new workflow ID's
	// run is inserted, with its generation.
	rows, err := pool.Query(ctx, startRunSQL(names),
		[]string{"00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000002", "00000000-0000-0000-0000-000000000003"},
		[]string{"default", "default", "default"}, []string{"wf-5", "wf-20", "wf-new"}, []string{"k", "k", "k"},
		[]string{"default", "default", "default"}, [][]byte{[]byte("x"), []byte("y"), []byte("z")},
		[]string{"rx", "ry", "rz"}, [][]byte{[]byte("h"), []byte("h"), []byte("h")}, []string{"{}", "{}", "{}"},
		[]bool{true, false, false}, []bool{false, false, false}, []bool{true, true, true}, []*int64{nil, nil, nil},
		[]int64{0, 0, 0}, []int64{0, 0, 0}, []*time.Time{nil, nil, nil}, []int64{0, 0, 5},
		[]bool{true, true, true})
	require.NoError(t, err)
	type row struct{ k, which, generation int }
	var got []row
	for rows.Next() {
		var (
			r     row
			f     FoundRun
			other any
		)
		require.NoError(t, rows.Scan(&r.k, &r.which, &f.RunID, &r.generation, &f.RequestHash, &f.State, &other, &other, &other))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	require.ElementsMatch(t, []row{{1, 3, 1}, {2, 2, 1}, {2, 3, 1}, {3, 0, 1}}, got)
	// The run inserted at the append point asked for (a start in one round
	// trip, its first task run ahead).
	var next int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT next_event_id FROM "+names.Run+" WHERE workflow_id = 'wf-new'").Scan(&next))
	require.Equal(t, int64(5), next)
	var runs int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+names.Run+" WHERE workflow_id IN ('wf-5', 'wf-20', 'wf-new')").Scan(&runs))
	require.Equal(t, 3, runs, "one new run, none for the refused starts")
	// Its first task's job, queued with it as River queues one; none for the
	// refused starts.
	var (
		kind, queue, state          string
		maxAttempts, priority, tags int
		args                        []byte
	)
	require.NoError(t, pool.QueryRow(ctx, "SELECT j.kind, j.queue, j.state, j.max_attempts, j.priority, cardinality(j.tags), j.args"+
		" FROM "+names.Run+" r JOIN "+names.RiverJob+" j ON j.id = r.task_job_id WHERE r.workflow_id = 'wf-new'"+
		" AND j.metadata = '{}' AND j.scheduled_at <= now() AND j.attempt = 0").
		Scan(&kind, &queue, &state, &maxAttempts, &priority, &tags, &args))
	require.Equal(t, []any{"weir.workflow:default/k", "default", "available", task.MaxAttempts, 1, 0},
		[]any{kind, queue, state, maxAttempts, priority, tags})
	var decoded task.Args
	require.NoError(t, json.Unmarshal(args, &decoded))
	require.Equal(t, task.Args{RunID: uuid.MustParse("00000000-0000-0000-0000-000000000003"), WorkflowID: "wf-new"}, decoded)
	var jobs int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+names.RiverJob).Scan(&jobs))
	require.Equal(t, 1, jobs)
}

// insertRuns inserts workflows wf-from to wf-to of namespace default, each
// with one run at generation 1 (wf-15's of request ID r15): running for
// every tenth, completed for the others.
func insertRuns(t *testing.T, pool *pgxpool.Pool, names *dbschema.Names, from, to int) {
	t.Helper()
	_, err := pool.Exec(t.Context(), "INSERT INTO "+names.Namespace+" (name) VALUES ('default') ON CONFLICT DO NOTHING")
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(), "INSERT INTO "+names.Workflow+" (namespace, workflow_id, last_generation)"+
		" SELECT 'default', 'wf-' || i, 1 FROM generate_series($1::int, $2::int) i", from, to)
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(), "INSERT INTO "+names.Run+
		" (run_id, namespace, workflow_id, generation, kind, queue, args, request_id, request_hash, state, closed_at)"+
		" SELECT gen_random_uuid(), 'default', 'wf-' || i, 1, 'k', 'default', '\\x', 'r' || i, '\\x',"+
		"  CASE WHEN i % 10 = 0 THEN 'running' ELSE 'completed' END, CASE WHEN i % 10 = 0 THEN NULL ELSE now() END"+
		" FROM generate_series($1::int, $2::int) i", from, to)
	require.NoError(t, err)
}

// requireByKey fails unless every table plan reads, it reads by key: no
// sequential scan, and no walk of a whole index (weir_run_live_idx, which
// covers the live runs, read without a condition on its columns).
func requireByKey(t *testing.T, plan, what string) {
	t.Helper()
	for _, scan := range dbtest.PlanScans(plan) {
		require.NotEmpty(t, scan.Cond, "%s: %s reads without a key:\n%s", what, scan.Line, plan)
	}
}

// TestStartOneTakesRunsByKey: a start alone's lookup and insert
// (startOneSQL, over scalars) reads runs by key only, planned on a new
// install's empty tables and on a runs table of tens of thousands of rows,
// custom or generic, and does what startRunSQL does for each of its starts.
func TestStartOneTakesRunsByKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.FreshSchema(ctx, t)
	names := dbschema.New(schema)
	literals := "'00000000-0000-0000-0000-000000000001', 'default', 'wf-1', 'k', 'default', 'x', 'r1', 'h', '{}', false, false," +
		" true, NULL, 0, 0, NULL, 0, true"

	plan := dbtest.ExplainPrepared(ctx, t, pool, dbschema.GenericPlansSQL, startOneSQL(names), literals)
	requireByKey(t, plan, "planned on the empty tables")
	require.NotContains(t, plan, "'wf-1'", "a generic plan, its parameters unbound:\n%s", plan)

	insertRuns(t, pool, names, 10, 30000)
	for _, settings := range []string{"", dbschema.GenericPlansSQL} {
		requireByKey(t, dbtest.ExplainPrepared(ctx, t, pool, settings, startOneSQL(names), literals), "settings "+settings)
	}

	// Through QueueStartRuns, as startRunSQL's test has its three starts:
	// the completed run a policy refuses (wf-15, its request unknown) and
	// the live run (wf-20) are found, and only the new workflow ID's run is
	// inserted, with its generation, its append point and its first task's
	// job.
	st := New(names)
	start := func(id uuid.UUID, workflowID string, rejectAny bool) StartRunResult {
		t.Helper()
		p := StartRunParams{
			RunID: id, Namespace: "default", WorkflowID: workflowID, Kind: "k", Queue: "default", Args: []byte("x"),
			RequestID: "r-" + workflowID, RequestHash: []byte("h"), TraceContext: []byte("{}"), QueueTask: true,
			NextEventID: 5, Insert: true, RejectAny: rejectAny,
		}
		var into [1]StartRunResult
		batch := &pgx.Batch{}
		st.QueueStartRuns(batch, &p, into[:])
		require.NoError(t, pool.SendBatch(ctx, batch).Close())
		require.True(t, into[0].Read)
		return into[0]
	}
	refused := start(uuid.MustParse("00000000-0000-0000-0000-000000000001"), "wf-15", true)
	require.False(t, refused.Inserted)
	require.Nil(t, refused.ByRequest)
	require.Nil(t, refused.Live)
	require.NotNil(t, refused.Last)
	require.Equal(t, "completed", refused.Last.State)
	live := start(uuid.MustParse("00000000-0000-0000-0000-000000000002"), "wf-20", false)
	require.False(t, live.Inserted)
	require.NotNil(t, live.Live)
	require.Equal(t, live.Live.RunID, live.Last.RunID)
	inserted := start(uuid.MustParse("00000000-0000-0000-0000-000000000003"), "wf-new", false)
	require.True(t, inserted.Inserted)
	require.Equal(t, int64(1), inserted.Generation)
	require.Nil(t, inserted.RunDeadline)
	require.False(t, inserted.CreatedAt.IsZero())
	var (
		next                 int64
		kind, state, trace   string
		taskArgs, requestHsh []byte
	)
	require.NoError(t, pool.QueryRow(ctx, "SELECT r.next_event_id, r.trace_context::text, r.request_hash, j.kind, j.state, j.args"+
		" FROM "+names.Run+" r JOIN "+names.RiverJob+" j ON j.id = r.task_job_id WHERE r.workflow_id = 'wf-new'").
		Scan(&next, &trace, &requestHsh, &kind, &state, &taskArgs))
	require.Equal(t, []any{int64(5), "{}", []byte("h"), "weir.workflow:default/k", "available"}, []any{next, trace, requestHsh, kind, state})
	var decoded task.Args
	require.NoError(t, json.Unmarshal(taskArgs, &decoded))
	require.Equal(t, task.Args{RunID: uuid.MustParse("00000000-0000-0000-0000-000000000003"), WorkflowID: "wf-new"}, decoded)
	var runs, jobs int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+names.Run+" WHERE workflow_id IN ('wf-15', 'wf-20', 'wf-new')").Scan(&runs))
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+names.RiverJob).Scan(&jobs))
	require.Equal(t, []int{3, 1}, []int{runs, jobs}, "one new run and its task's job, none for the refused starts")

	// The same start again: its request ID finds its run (a replay), and
	// nothing more is inserted.
	again := start(uuid.MustParse("00000000-0000-0000-0000-000000000004"), "wf-new", false)
	require.False(t, again.Inserted)
	require.NotNil(t, again.ByRequest)
	require.Equal(t, uuid.MustParse("00000000-0000-0000-0000-000000000003"), uuid.UUID(again.ByRequest.RunID))
}
