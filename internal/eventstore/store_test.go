package eventstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/eventstore"
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/migrations"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// migrated returns a new schema migrated up to weir's version weirVersion
// (0: the latest), its migrator, and a run in it to write events of.
func migrated(t *testing.T, weirVersion int) (*dbschema.Names, *migrations.Migrator, uuid.UUID) {
	t.Helper()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema, migrator := dbtest.SchemaAt(ctx, t, migrations.LineWeir, weirVersion)
	names := dbschema.New(schema)
	runID := uuid.New()
	_, err := pool.Exec(ctx, "INSERT INTO "+names.Workflow+" (namespace, workflow_id, last_generation) VALUES ('default', 'wf', 1)")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+names.Run+" (run_id, namespace, workflow_id, generation, kind, queue, args, request_id, request_hash)"+
		" VALUES ($1, 'default', 'wf', 1, 'k', 'default', '\\x', 'r', '\\x')", runID)
	require.NoError(t, err)
	return names, migrator, runID
}

// TestStoreAcrossMigration writes a history in both shapes (rows before weir
// 004, a boundary folded into its command's row after it) and reads it back
// whole and by pages, then takes 004 down and reads the unfolded rows.
func TestStoreAcrossMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	names, migrator, runID := migrated(t, 3)

	at := time.Date(2026, 12, 3, 17, 0, 0, 0, time.UTC)
	var all []history.Event
	add := func(typ history.EventType, attributes string) {
		all = append(all, history.Event{ID: int64(len(all) + 1), Type: typ, Attributes: json.RawMessage(attributes), Time: at})
	}
	boundary := func(attempt int) string {
		return fmt.Sprintf(`{"now": "%s", "attempt": %d}`, at.Format(time.RFC3339Nano), attempt)
	}
	write := func(events []history.Event, fold bool) {
		t.Helper()
		rows := history.Rows(events, fold)
		for _, r := range rows {
			columns, values, args := "", "", []any{runID, r.ID, string(r.Type), string(r.Attributes), r.Time}
			if fold {
				var b *string
				if r.Boundary != nil {
					s := string(r.Boundary)
					b = &s
				}
				columns, values, args = ", boundary", ", $6", append(args, b)
			}
			_, err := pool.Exec(ctx, "INSERT INTO "+names.Event+" (run_id, event_id, type, attributes, created_at"+columns+")"+
				" VALUES ($1, $2, $3, $4, $5"+values+")", args...)
			require.NoError(t, err)
		}
		at = at.Add(time.Second)
	}
	requireHistory := func(store *eventstore.Store) {
		t.Helper()
		got, err := store.LoadAll(ctx, pool, runID)
		require.NoError(t, err)
		require.Len(t, got, len(all))
		for i := range all {
			require.Equal(t, all[i].ID, got[i].ID)
			require.Equal(t, all[i].Type, got[i].Type, "event %d", all[i].ID)
			require.JSONEq(t, string(all[i].Attributes), string(got[i].Attributes), "event %d", all[i].ID)
			require.True(t, all[i].Time.Equal(got[i].Time), "event %d at %s, read %s", all[i].ID, all[i].Time, got[i].Time)
		}
	}
	count := func(table string) (n int) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE run_id = $1", runID).Scan(&n))
		return n
	}

	// Before 004: one row per event, and nothing to fold into.
	store := eventstore.New(names)
	folding, err := store.Check(ctx, pool)
	require.NoError(t, err)
	require.False(t, folding)
	add(history.EventWorkflowStarted, `{"kind": "k"}`)
	add(history.EventWorkflowTaskStarted, boundary(1))
	add(history.EventActivityScheduled, `{"kind": "a"}`)
	write(all[0:3], false)
	requireHistory(store)

	// After 004, the same store finds the column and reads both shapes.
	_, err = migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineWeir})
	require.NoError(t, err)
	require.False(t, store.Folding(), "nothing asked the catalog yet")
	folding, err = store.Check(ctx, pool)
	require.NoError(t, err)
	require.True(t, folding)
	add(history.EventActivityCompleted, `{"scheduled_event_id": 3}`)
	add(history.EventWorkflowTaskStarted, boundary(1)) // 5: folded into 6
	add(history.EventTimerStarted, `{"duration": 1}`)
	write(all[3:6], true)
	add(history.EventTimerFired, `{"started_event_id": 6}`)
	add(history.EventWorkflowTaskStarted, boundary(2)) // 8: no command, a row of its own
	write(all[6:8], true)
	add(history.EventSignalReceived, `{"name": "s"}`)
	add(history.EventWorkflowTaskStarted, boundary(1)) // 10: folded into 11
	add(history.EventWorkflowCompleted, `{"result": 1}`)
	write(all[8:11], true)
	requireHistory(store)
	require.Equal(t, 9, count(names.Event), "two boundaries were folded")

	// A store that never asked the catalog reads folded rows through their
	// JSON (no window between a check and the read), and learns the column
	// from the first folded row.
	fresh := eventstore.New(names)
	require.False(t, fresh.Folding())
	requireHistory(fresh)
	require.True(t, fresh.Folding())
	require.Equal(t, 11, count(names.History), "the view has one row per event")

	// Pages: a boundary folded into a row is its own event; a page that
	// ends on it goes on with the command.
	page := func(after int64, limit int) (ids []int64) {
		t.Helper()
		events, err := store.Load(ctx, pool, runID, after, limit)
		require.NoError(t, err)
		for _, e := range events {
			ids = append(ids, e.ID)
		}
		return ids
	}
	require.Equal(t, []int64{1, 2, 3, 4, 5}, page(0, 5))
	require.Equal(t, []int64{5}, page(4, 1))
	require.Equal(t, []int64{6, 7}, page(5, 2))
	require.Equal(t, []int64{10, 11}, page(9, 0))
	require.Equal(t, []int64{11}, page(10, 3))
	require.Empty(t, page(11, 3))

	// A history with a gap is refused.
	_, err = pool.Exec(ctx, "UPDATE "+names.Event+" SET boundary = NULL WHERE run_id = $1 AND event_id = 11", runID)
	require.NoError(t, err)
	_, err = store.LoadAll(ctx, pool, runID)
	require.ErrorContains(t, err, "has a gap: event 11 at position 10")
	_, err = pool.Exec(ctx, "UPDATE "+names.Event+" SET boundary = $2 WHERE run_id = $1 AND event_id = 11", runID, boundary(1))
	require.NoError(t, err)
	all[9].Attributes = json.RawMessage(boundary(1))
	requireHistory(store)

	// Down: every boundary back in a row of its own. The store still
	// believes in the column; its next read finds it gone, forgets it and
	// reads the unfolded rows, right the first time.
	_, err = migrator.Down(ctx, &migrations.DownOpts{Line: migrations.LineWeir, TargetVersion: 3})
	require.NoError(t, err)
	require.Equal(t, 11, count(names.Event))
	require.True(t, store.Folding())
	requireHistory(store)
	require.False(t, store.Folding())
	requireHistory(store)

	// Up again: nothing is folded twice, and the history reads the same.
	_, err = migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineWeir})
	require.NoError(t, err)
	folding, err = store.Check(ctx, pool)
	require.NoError(t, err)
	require.True(t, folding)
	requireHistory(store)
}

// TestDownWaitsForATask takes weir 004 down while a workflow task holds its
// run and has read its history: the migration waits for the task, the
// task's folded write goes through, and the migration then unfolds it too.
// (Locking weir_event first, the migration waited for the run the task
// held while the task's insert waited for weir_event: a deadlock.)
func TestDownWaitsForATask(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	names, migrator, runID := migrated(t, 0)
	insert := "INSERT INTO " + names.Event + " (run_id, event_id, type, attributes, boundary) VALUES ($1, $2, $3, '{}', $4)"
	_, err := pool.Exec(ctx, insert, runID, 1, "WorkflowStarted", nil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, insert, runID, 3, "ActivityScheduled", `{"attempt": 1}`)
	require.NoError(t, err)

	task, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = task.Rollback(context.WithoutCancel(ctx)) }()
	_, err = task.Exec(ctx, "SELECT 1 FROM "+names.Run+" WHERE run_id = $1 FOR UPDATE", runID)
	require.NoError(t, err)
	store := eventstore.New(names)
	events, err := store.LoadAll(ctx, task, runID)
	require.NoError(t, err)
	require.Len(t, events, 3)

	migrated := make(chan error, 1)
	go func() {
		_, err := migrator.Down(ctx, &migrations.DownOpts{Line: migrations.LineWeir, TargetVersion: 3})
		migrated <- err
	}()
	require.Eventually(t, func() bool { // until the migration waits for a lock
		var waiting bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid)"+
			" WHERE NOT l.granted AND a.query LIKE '%weir_event%')").Scan(&waiting))
		return waiting
	}, 10*time.Second, 10*time.Millisecond)

	_, err = task.Exec(ctx, insert, runID, 5, "ActivityScheduled", `{"attempt": 1}`)
	require.NoError(t, err, "the task's write does not deadlock with the migration")
	require.NoError(t, task.Commit(ctx))
	require.NoError(t, <-migrated)

	var rows int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+names.Event+" WHERE run_id = $1", runID).Scan(&rows))
	require.Equal(t, 5, rows, "both boundaries have rows of their own")
	events, err = eventstore.New(names).LoadAll(ctx, pool, runID)
	require.NoError(t, err)
	require.Len(t, events, 5)
	require.Equal(t, history.EventWorkflowTaskStarted, events[3].Type)
}

// TestLoadPages folds random histories (tasks with and without commands,
// commands at another time than their boundary), stores them, and requires
// every page (each after, each limit up to the history's length) to be the
// matching slice of the whole history, which must unfold to what was
// written.
func TestLoadPages(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	names := dbschema.New(schema)
	store := eventstore.New(names)
	rng := rand.New(rand.NewPCG(33, 4))
	_, err := pool.Exec(ctx, "INSERT INTO "+names.Workflow+" (namespace, workflow_id, last_generation) VALUES ('default', 'wf', 0)")
	require.NoError(t, err)

	for h := range 12 {
		runID := uuid.New()
		_, err := pool.Exec(ctx, "UPDATE "+names.Workflow+" SET last_generation = last_generation + 1")
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "INSERT INTO "+names.Run+" (run_id, namespace, workflow_id, generation, kind, queue, state, args, request_id, request_hash, closed_at)"+
			" VALUES ($1, 'default', 'wf', $2, 'k', 'default', 'completed', '\\x', $3, '\\x', now())", runID, h+1, fmt.Sprint("r", h))
		require.NoError(t, err)

		at := time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC)
		var all []history.Event
		add := func(typ history.EventType, attributes string) {
			all = append(all, history.Event{ID: int64(len(all) + 1), Type: typ, Attributes: json.RawMessage(attributes), Time: at})
		}
		add(history.EventWorkflowStarted, `{"kind": "k"}`)
		var rows []history.Row
		for task := range 1 + rng.IntN(8) {
			from := len(all)
			if task > 0 {
				for range rng.IntN(3) {
					add(history.EventSignalReceived, `{"name": "s"}`)
				}
			}
			add(history.EventWorkflowTaskStarted, fmt.Sprintf(`{"now": "%s", "attempt": %d}`, at.Format(time.RFC3339Nano), 1+rng.IntN(2)))
			if rng.IntN(5) == 0 {
				at = at.Add(time.Millisecond) // a command at another time: not folded
			}
			for range rng.IntN(4) {
				add(history.EventTimerStarted, `{"duration": 1}`)
			}
			rows = append(rows, history.Rows(all[from:], true)...)
			at = at.Add(time.Second)
		}
		rows = append(history.Rows(all[:1], true), rows...)
		for _, r := range rows {
			var b *string
			if r.Boundary != nil {
				s := string(r.Boundary)
				b = &s
			}
			_, err := pool.Exec(ctx, "INSERT INTO "+names.Event+" (run_id, event_id, type, attributes, created_at, boundary) VALUES ($1, $2, $3, $4, $5, $6)",
				runID, r.ID, string(r.Type), string(r.Attributes), r.Time, b)
			require.NoError(t, err)
		}

		whole, err := store.LoadAll(ctx, pool, runID)
		require.NoError(t, err)
		require.Len(t, whole, len(all))
		for i := range all {
			require.Equal(t, all[i].ID, whole[i].ID)
			require.Equal(t, all[i].Type, whole[i].Type)
			require.JSONEq(t, string(all[i].Attributes), string(whole[i].Attributes))
			require.True(t, all[i].Time.Equal(whole[i].Time))
		}
		for after := 0; after <= len(all); after++ {
			for limit := 0; limit <= len(all)-after+1; limit++ {
				page, err := store.Load(ctx, pool, runID, int64(after), limit)
				require.NoError(t, err)
				want := whole[after:]
				if limit > 0 && len(want) > limit {
					want = want[:limit]
				}
				if len(want) == 0 {
					require.Empty(t, page, "history %d, after %d, limit %d", h, after, limit)
					continue
				}
				require.Equal(t, want, page, "history %d, after %d, limit %d", h, after, limit)
			}
		}
	}
}
