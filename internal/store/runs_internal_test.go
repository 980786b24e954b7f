package store

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/array"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/engine"
	"github.com/weirhq/weir/internal/history"
)

// TestQueueSteps: a group's events, retirements, activity records, inbox
// items taken, rejections of pending updates and continuing (clearing
// their task job or not) or completing CASes become one statement each,
// with every member's rows, in a fixed order; a group of one writes as a
// lone step does.
func TestQueueSteps(t *testing.T) {
	t.Parallel()
	s := New(dbschema.New("s"))
	a, b, c, d, e := uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()
	now := time.Now()
	one := int64(1)
	deadline := now.Add(time.Hour)
	event := func(id int64, typ string) history.Event {
		return history.Event{ID: id, Type: history.EventType(typ), Attributes: []byte("{}"), Time: now}
	}
	resolving := []byte(`{"scheduled_event_id":1}`) // an outcome of event 1
	outcome := func(id int64) history.Event {
		return history.Event{ID: id, Type: history.EventActivityCompleted, Attributes: resolving, Time: now}
	}
	steps := []*engine.StepWrites{
		{RunID: a, Events: []history.Event{outcome(4), event(5, "y")}, Retired: []int64{1},
			Activities: []engine.Activity{{ScheduledEventID: 6, JobID: 100, Kind: "act", Deadline: &deadline}}, CAS: &engine.RunCAS{Found: 4, Next: 6}},
		{RunID: b, Events: []history.Event{event(9, "z")}, Retired: []int64{7},
			Activities: []engine.Activity{{ScheduledEventID: 10, JobID: 101, Kind: "act"}}, CAS: &engine.RunCAS{Found: 9, Next: 10}},
		{RunID: e, Taken: []int64{55, 56}, CAS: &engine.RunCAS{Found: 1, Next: 2, ClearTask: 33}}, // a task's
		nil,
		{RunID: c, AbandonUpdates: true, CAS: &engine.RunCAS{Found: 7, Next: 9, Close: &engine.RunClose{State: "completed", Result: []byte("1")}}},
		{RunID: d, AbandonUpdates: true, CAS: &engine.RunCAS{Found: 8, Next: 10, Close: &engine.RunClose{State: "completed"}}},
	}
	batch := &pgx.Batch{}
	require.True(t, s.QueueSteps(batch, steps, new(Arrays)))
	var sqls []string
	for _, qq := range batch.QueuedQueries {
		sqls = append(sqls, qq.SQL)
	}
	require.Equal(t, []string{s.runs.eventsMerged, s.runs.retireMerged, s.runs.activityMerged, s.runs.deleteInbox, s.runs.abandonMerged,
		s.runs.advanceMerged, s.runs.completeMerged}, sqls)
	q := batch.QueuedQueries
	require.Equal(t, []any{array.UUIDs{a, a, b}, array.Int64s{4, 5, 9}, array.Texts{"ActivityCompleted", "y", "z"}, array.JSON{resolving, []byte("{}"), []byte("{}")},
		array.NullInt64s{&one, nil, nil}, array.Times{now, now, now}, array.JSON{nil, nil, nil}}, q[0].Arguments)
	require.Equal(t, []any{array.UUIDs{a, b}, array.Int64s{1, 7}}, q[1].Arguments)
	require.Equal(t, []any{array.UUIDs{a, b}, array.Int64s{6, 10}, array.Int64s{100, 101}, array.Texts{"act", "act"}, array.NullTimes{&deadline, nil}}, q[2].Arguments)
	require.Equal(t, []any{array.Int64s{55, 56}}, q[3].Arguments)
	require.Equal(t, []any{array.UUIDs{c, d}, engine.AbandonedFailure, dbschema.Channel("s", dbschema.UpdateDoneChannel)}, q[4].Arguments)
	require.Equal(t, []any{array.UUIDs{a, b, e}, array.Int64s{4, 9, 1}, array.Int64s{6, 10, 2}, array.Int64s{0, 0, 33}, 3}, q[5].Arguments)
	require.NotNil(t, q[5].Fn, "the merged CAS reads its check")
	require.Equal(t, []any{array.UUIDs{c, d}, array.Int64s{7, 8}, array.Int64s{9, 10}, array.Bytes{[]byte("1"), nil}, 2}, q[6].Arguments)
	require.NotNil(t, q[6].Fn)

	// A member whose boundary folds into its command's row and one whose
	// does not: one statement, the other's rows without a boundary.
	boundary := []byte(`{"attempt":1}`)
	started := history.Event{ID: 9, Type: history.EventWorkflowTaskStarted, Attributes: boundary, Time: now}
	mixed := &pgx.Batch{}
	require.True(t, s.QueueSteps(mixed, []*engine.StepWrites{{RunID: a, Events: []history.Event{event(4, "x")}},
		{RunID: b, Events: []history.Event{outcome(8), started, event(10, string(history.EventActivityScheduled))}},
		{RunID: c, Events: []history.Event{event(2, "w")}}}, new(Arrays)))
	require.Len(t, mixed.QueuedQueries, 1)
	require.Equal(t, s.runs.eventsMerged, mixed.QueuedQueries[0].SQL)
	require.Equal(t, []any{array.UUIDs{a, b, b, c}, array.Int64s{4, 8, 10, 2}, array.Texts{"x", "ActivityCompleted", "ActivityScheduled", "w"},
		array.JSON{[]byte("{}"), resolving, []byte("{}"), []byte("{}")},
		array.NullInt64s{nil, &one, nil, nil}, array.Times{now, now, now, now}, array.JSON{nil, nil, boundary, nil}}, mixed.QueuedQueries[0].Arguments)

	// A kind one member holds: its lone form.
	single := &pgx.Batch{}
	require.False(t, s.QueueSteps(single, []*engine.StepWrites{{RunID: a, Events: []history.Event{event(4, "x")}, CAS: &engine.RunCAS{Found: 4, Next: 5}}}, new(Arrays)))
	require.Equal(t, s.runs.events, single.QueuedQueries[0].SQL, "one member: as a lone step")
	require.Equal(t, s.runs.advance, single.QueuedQueries[1].SQL)
	require.Equal(t, []any{a, int64(4), int64(5), int64(0)}, single.QueuedQueries[1].Arguments)
	retired := &pgx.Batch{}
	require.False(t, s.QueueSteps(retired, []*engine.StepWrites{{RunID: a, Retired: []int64{3, 4}}, {RunID: b, CAS: &engine.RunCAS{Found: 4, Next: 5}}}, new(Arrays)))
	require.Equal(t, []string{s.runs.retireMany, s.runs.advance}, []string{retired.QueuedQueries[0].SQL, retired.QueuedQueries[1].SQL})
}

// TestArraysReset: the arrays a group's statements carry, once reset, hold
// nothing of the group and keep their room, and the next group's
// statements carry its own rows in them.
func TestArraysReset(t *testing.T) {
	t.Parallel()
	s := New(dbschema.New("s"))
	a, b := uuid.New(), uuid.New()
	now := time.Now()
	deadline := now.Add(time.Hour)
	step := func(run uuid.UUID, id int64) *engine.StepWrites {
		return &engine.StepWrites{RunID: run, Retired: []int64{id}, Taken: []int64{id},
			Events:     []history.Event{{ID: id, Type: history.EventActivityCompleted, Attributes: []byte(`{"scheduled_event_id":1}`), Time: now}},
			Activities: []engine.Activity{{ScheduledEventID: id, JobID: id, Kind: "act", Deadline: &deadline}}, AbandonUpdates: true,
			CAS: &engine.RunCAS{Found: id, Next: id + 1, Close: &engine.RunClose{State: "completed", Result: []byte("1")}}}
	}
	arrays := new(Arrays)
	require.True(t, s.QueueSteps(&pgx.Batch{}, []*engine.StepWrites{step(a, 4), step(b, 5)}, arrays))
	arrays.Reset()
	for _, lists := range [][]any{anys(arrays.uuids.lists), anys(arrays.int64s.lists), anys(arrays.nullInt64s.lists), anys(arrays.texts.lists),
		anys(arrays.bytes.lists), anys(arrays.times.lists), anys(arrays.nullTimes.lists), anys(arrays.steps.lists)} {
		require.NotEmpty(t, lists)
		for _, l := range lists {
			v := reflect.ValueOf(l)
			require.Positive(t, v.Cap(), "its room kept")
			require.True(t, isZeroed(v.Slice(0, v.Cap())), "nothing held: %v", v.Slice(0, v.Cap()))
		}
	}
	batch := &pgx.Batch{}
	require.True(t, s.QueueSteps(batch, []*engine.StepWrites{step(b, 7), step(a, 8)}, arrays))
	one := int64(1)
	q := batch.QueuedQueries
	require.Equal(t, []any{array.UUIDs{b, a}, array.Int64s{7, 8}, array.Texts{"ActivityCompleted", "ActivityCompleted"},
		array.JSON{[]byte(`{"scheduled_event_id":1}`), []byte(`{"scheduled_event_id":1}`)}, array.NullInt64s{&one, &one},
		array.Times{now, now}, array.JSON{nil, nil}}, q[0].Arguments)
	require.Equal(t, []any{array.UUIDs{b, a}, array.Int64s{7, 8}}, q[1].Arguments)
	require.Equal(t, []any{array.UUIDs{b, a}, array.Int64s{7, 8}, array.Int64s{7, 8}, array.Texts{"act", "act"}, array.NullTimes{&deadline, &deadline}}, q[2].Arguments)
	require.Equal(t, []any{array.Int64s{7, 8}}, q[3].Arguments)
	require.Equal(t, array.UUIDs{b, a}, q[4].Arguments[0])
	require.Equal(t, []any{array.UUIDs{b, a}, array.Int64s{7, 8}, array.Int64s{8, 9}, array.Bytes{[]byte("1"), []byte("1")}, 2}, q[5].Arguments)
}

// TestQueueLockRunsReadsEachRow: a group's lock reads each run's row as
// it is, whether its namespace, kind, queue and state are the last row's
// or not, under every query exec mode.
func TestQueueLockRunsReadsEachRow(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	schema := dbtest.FreshSchema(ctx, t)
	names := dbschema.New(schema)
	s := New(names)
	pool := dbtest.Pool(ctx, t)
	_, err := pool.Exec(ctx, "INSERT INTO "+names.Namespace+" (name) VALUES ('default'), ('other') ON CONFLICT DO NOTHING")
	require.NoError(t, err)
	want := []engine.Run{
		{ID: uuid.UUID{1}, Namespace: "default", WorkflowID: "wf-1", Kind: "k1", Queue: "q1", State: "running"},
		{ID: uuid.UUID{2}, Namespace: "default", WorkflowID: "wf-2", Kind: "k1", Queue: "q1", State: "running"},
		{ID: uuid.UUID{3}, Namespace: "other", WorkflowID: "wf-3", Kind: "k2", Queue: "q2", State: "completed"},
		{ID: uuid.UUID{4}, Namespace: "default", WorkflowID: "wf-4", Kind: "k1", Queue: "q2", State: "running"},
	}
	for i, r := range want {
		want[i].Generation, want[i].Args, want[i].NextEventID, want[i].TraceContext = 1, []byte("{}"), 4, []byte("{}")
		_, err := pool.Exec(ctx, "INSERT INTO "+names.Workflow+" (namespace, workflow_id, last_generation) VALUES ($1, $2, 1)", r.Namespace, r.WorkflowID)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "INSERT INTO "+names.Run+
			" (run_id, namespace, workflow_id, generation, kind, queue, state, closed_at, args, request_id, request_hash, next_event_id)"+
			" VALUES ($1, $2, $3, 1, $4, $5, $6, CASE WHEN $6 <> 'running' THEN now() END, '{}', $3, '\\x', 4)",
			r.ID, r.Namespace, r.WorkflowID, r.Kind, r.Queue, r.State)
		require.NoError(t, err)
	}
	ids := []uuid.UUID{want[0].ID, want[1].ID, want[2].ID, want[3].ID}
	for _, mode := range dbtest.QueryExecModes {
		t.Run(mode.String(), func(t *testing.T) {
			tx, err := dbtest.ModePool(ctx, t, mode, 1).Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			var got []engine.Run
			batch := &pgx.Batch{}
			s.QueueLockRuns(batch, ids, nil, func(run engine.Run, _ time.Time) error {
				got = append(got, run)
				return nil
			})
			require.NoError(t, tx.SendBatch(ctx, batch).Close())
			require.Equal(t, want, got)

			// What the caller knows of a row is kept where the row has the
			// same, and only there.
			same := engine.Run{WorkflowID: strings.Clone(want[0].WorkflowID), Args: []byte("{}"), TraceContext: []byte("{}")}
			other := engine.Run{WorkflowID: "wf-0", Args: []byte("[]"), TraceContext: []byte(`{"a":1}`)}
			known := []*engine.Run{&same, &other, nil, &same}
			got = got[:0]
			batch = &pgx.Batch{}
			s.QueueLockRuns(batch, ids, func(i int) *engine.Run { return known[i] }, func(run engine.Run, _ time.Time) error {
				got = append(got, run)
				return nil
			})
			require.NoError(t, tx.SendBatch(ctx, batch).Close())
			require.Equal(t, want, got)
			require.Same(t, unsafe.StringData(same.WorkflowID), unsafe.StringData(got[0].WorkflowID))
			require.Same(t, &same.Args[0], &got[0].Args[0])
			require.Same(t, &same.Args[0], &got[3].Args[0], "args the same")
			require.NotSame(t, &same.Args[0], &got[1].Args[0])
			require.NotSame(t, &other.Args[0], &got[1].Args[0])
			require.Same(t, &same.TraceContext[0], &got[0].TraceContext[0])
			require.NotSame(t, &other.TraceContext[0], &got[1].TraceContext[0])
		})
	}
}

// anys returns lists as anys.
func anys[T any](lists [][]T) []any {
	out := make([]any, len(lists))
	for i, l := range lists {
		out[i] = l
	}
	return out
}

// isZeroed reports whether every element of the slice v is zero.
func isZeroed(v reflect.Value) bool {
	for i := range v.Len() {
		if !v.Index(i).IsZero() {
			return false
		}
	}
	return true
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
	s := New(names)

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
	// With the statistics of the young tables, then of grown ones where
	// most runs have closed, as after a burst (few live runs: a generic plan
	// expects a run or two, and once looped over its batch for each).
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			_, err := pool.Exec(ctx, "UPDATE "+names.Run+" SET state = 'completed', closed_at = now() WHERE run_id <> ALL($1)", runs)
			require.NoError(t, err)
			_, err = pool.Exec(ctx, "ANALYZE "+names.Run+"; ANALYZE "+names.Activity)
			require.NoError(t, err)
		}
		for _, generic := range []bool{false, true} {
			requireMergedPlans(t, s, uuids, analyzed, generic, func(query, literals string) string {
				t.Helper()
				settings := dbschema.HashJoinsSQL
				if generic {
					settings = dbschema.GenericPlansSQL + "; " + dbschema.HashJoinsSQL
				}
				return dbtest.ExplainPrepared(ctx, t, pool, settings, query, literals)
			})
		}
	}

	// A moved append point: nothing of the statement stays.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, s.runs.advanceMerged, runs, []int64{4, 4, 3, 4, 4}, next, make([]int64, len(runs)), len(runs))
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, pgerrcode.DivisionByZero, pgErr.Code)
	require.NoError(t, tx.Rollback(ctx))

	// A group's writes through QueueSteps; one member's append point moved:
	// nothing of the group stays.
	now := time.Now()
	row := func(id int64, typ string) history.Event {
		return history.Event{ID: id, Type: history.EventType(typ), Attributes: []byte("{}"), Time: now}
	}
	boundary := history.Event{ID: 5, Type: history.EventWorkflowTaskStarted, Attributes: []byte(`{"attempt": 1}`), Time: now}
	_, err = pool.Exec(ctx, "INSERT INTO "+names.Update+" (run_id, update_id, kind) VALUES ($1, 'u1', 'k'), ($2, 'u2', 'k'), ($3, 'u3', 'k')",
		runs[2], runs[3], runs[4])
	require.NoError(t, err)
	group := func(moved int64) []*engine.StepWrites {
		return []*engine.StepWrites{
			{RunID: runs[0], Events: []history.Event{row(4, "a"), row(5, "b")}, Retired: scheduled[:1], CAS: &engine.RunCAS{Found: found[0], Next: 6}},
			{RunID: runs[1], Events: []history.Event{row(4, "c")}, Retired: scheduled[:1], CAS: &engine.RunCAS{Found: moved, Next: 5}},
			{RunID: runs[2], AbandonUpdates: true, CAS: &engine.RunCAS{Found: 4, Next: 7, Close: &engine.RunClose{State: "completed", Result: []byte("42")}}},
			{RunID: runs[3], AbandonUpdates: true, CAS: &engine.RunCAS{Found: 4, Next: 7, Close: &engine.RunClose{State: "completed"}}},
			{RunID: runs[4], Events: []history.Event{row(4, "a"), boundary, row(6, "ActivityScheduled")}},
		}
	}
	arrays := new(Arrays) // kept from one group to the next
	batch := &pgx.Batch{}
	require.True(t, s.QueueSteps(batch, group(3), arrays))
	require.ErrorIs(t, pool.SendBatch(ctx, batch).Close(), ErrRunMoved)
	arrays.Reset()
	batch = &pgx.Batch{}
	require.True(t, s.QueueSteps(batch, group(4), arrays))
	require.NoError(t, pool.SendBatch(ctx, batch).Close())
	var completed int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+names.Run+" WHERE run_id = ANY($1) AND state = 'completed'"+
		" AND closed_at IS NOT NULL AND next_event_id = 7 AND result IS NOT DISTINCT FROM CASE WHEN run_id = $2 THEN '42'::bytea END",
		runs[2:4], runs[2]).Scan(&completed))
	require.Equal(t, 2, completed)

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
	s := New(names)

	// The connection leaves the pool, and closes with the statements
	// prepared on it: a later test (or a rerun, -count=2) that takes a
	// connection from the pool finds none of them there.
	pooled, err := pool.Acquire(ctx)
	require.NoError(t, err)
	conn := pooled.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	// As a group sends them: its locking read with generic plans asked
	// for, its last writes between dbschema.HashJoinsSQL and HashJoinsEndSQL.
	joins := dbschema.GenericPlansSQL + "; " + dbschema.HashJoinsSQL
	statements := []struct{ query, settings, literals string }{
		{s.runs.lockMany, dbschema.GenericPlansSQL, "'{00000000-0000-4000-8000-000000000001}'"},
		{s.runs.advanceMerged, joins, "'{00000000-0000-4000-8000-000000000001}', '{4}', '{6}', '{0}', 1"},
		{s.runs.completeMerged, joins, "'{00000000-0000-4000-8000-000000000001}', '{4}', '{6}', '{NULL}', 1"},
		{s.runs.retireMerged, joins, "'{00000000-0000-4000-8000-000000000001}', '{3}'"},
	}
	// explain explains the prepared statements, each planned (the first
	// time) or taken from the connection's cache (after), in a transaction
	// as a group's.
	explain := func(when string) {
		t.Helper()
		for i, s := range statements {
			plan := dbtest.ExplainExecute(ctx, t, conn, s.settings, fmt.Sprintf("young_%d", i), s.literals)
			require.Empty(t, dbtest.FilteredLoops(plan), "%s: a batch joined row by row:\n%s", when, plan)
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

// requireMergedPlans checks the plans of a group's merged run statements
// (explained by explain): no sequential scan; a generic plan keeps its
// parameters unbound and joins its batch by hash, not row by row (the
// nested loop that reads the batch again for every run is quadratic in
// the group's size), a custom plan binds them.
func requireMergedPlans(t *testing.T, s *Store, uuids string, analyzed, generic bool, explain func(query, literals string) string) {
	t.Helper()
	for _, plan := range []string{
		explain(s.runs.lockMany, uuids),
		explain(s.runs.advanceMerged, uuids+", '{4,4,4,4,4}', '{6,6,6,6,6}', '{0,0,0,0,0}', 5"),
		explain(s.runs.completeMerged, uuids+", '{4,4,4,4,4}', '{6,6,6,6,6}', '{NULL,NULL,NULL,NULL,NULL}', 5"),
		explain(s.runs.retireMerged, uuids+", '{3,3,3,3,3}'"),
	} {
		require.NotContains(t, plan, "Seq Scan on weir_run", "analyzed %v, generic %v:\n%s", analyzed, generic, plan)
		require.NotContains(t, plan, "Seq Scan on weir_activity", "analyzed %v, generic %v:\n%s", analyzed, generic, plan)
		if generic {
			require.NotContains(t, plan, "'{", "a generic plan, its parameters unbound:\n%s", plan)
			require.Empty(t, dbtest.FilteredLoops(plan), "analyzed %v: a batch joined row by row:\n%s", analyzed, plan)
		} else {
			require.Contains(t, plan, "'{", "a custom plan:\n%s", plan)
		}
	}
}
