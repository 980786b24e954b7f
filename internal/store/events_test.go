package store_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/store"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// migrated returns a new migrated schema and a run in it to write events of.
func migrated(t *testing.T) (*dbschema.Names, uuid.UUID) {
	t.Helper()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	names := dbschema.New(dbtest.TestSchema(ctx, t))
	runID := uuid.New()
	_, err := pool.Exec(ctx, "INSERT INTO "+names.Workflow+" (namespace, workflow_id, last_generation) VALUES ('default', 'wf', 1)")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+names.Run+" (run_id, namespace, workflow_id, generation, kind, queue, args, request_id, request_hash)"+
		" VALUES ($1, 'default', 'wf', 1, 'k', 'default', '\\x', 'r', '\\x')", runID)
	require.NoError(t, err)
	return names, runID
}

// insertRows writes rows of run as workers do: a boundary in the row of its
// command.
func insertRows(t *testing.T, names *dbschema.Names, runID uuid.UUID, rows []history.Row) {
	t.Helper()
	ctx := t.Context()
	for _, r := range rows {
		var b *string
		if r.Boundary != nil {
			s := string(r.Boundary)
			b = &s
		}
		_, err := dbtest.Pool(ctx, t).Exec(ctx, "INSERT INTO "+names.Event+" (run_id, event_id, type, attributes, created_at, boundary)"+
			" VALUES ($1, $2, $3, $4, $5, $6)", runID, r.ID, string(r.Type), string(r.Attributes), r.Time, b)
		require.NoError(t, err)
	}
}

// TestStoreUnfolds writes a history whose boundaries are folded into their
// commands' rows where they can be, and reads it back whole, by pages and
// through the weir_history view: one event per ID, 1, 2, 3… without gaps.
func TestStoreUnfolds(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	names, runID := migrated(t)

	at := time.Date(2026, 12, 3, 17, 0, 0, 0, time.UTC)
	var all []history.Event
	add := func(typ history.EventType, attributes string) {
		all = append(all, history.Event{ID: int64(len(all) + 1), Type: typ, Attributes: json.RawMessage(attributes), Time: at})
	}
	boundary := func(attempt int) string {
		return fmt.Sprintf(`{"now": "%s", "attempt": %d}`, at.Format(time.RFC3339Nano), attempt)
	}
	write := func(events []history.Event) {
		t.Helper()
		insertRows(t, names, runID, slices.Collect(history.Rows(events)))
		at = at.Add(time.Second)
	}
	st := store.New(names)
	requireHistory := func() {
		t.Helper()
		got, err := st.History(ctx, pool, runID)
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

	add(history.EventWorkflowStarted, `{"kind": "k"}`)
	write(all[0:1])
	add(history.EventWorkflowTaskStarted, boundary(1)) // 2: folded into 3
	add(history.EventActivityScheduled, `{"kind": "a"}`)
	write(all[1:3])
	add(history.EventActivityCompleted, `{"scheduled_event_id": 3}`)
	add(history.EventWorkflowTaskStarted, boundary(1)) // 5: folded into 6
	add(history.EventTimerStarted, `{"duration": 1}`)
	write(all[3:6])
	add(history.EventTimerFired, `{"started_event_id": 6}`)
	add(history.EventWorkflowTaskStarted, boundary(2)) // 8: no command, a row of its own
	write(all[6:8])
	add(history.EventSignalReceived, `{"name": "s"}`)
	add(history.EventWorkflowTaskStarted, boundary(1)) // 10: folded into 11
	add(history.EventWorkflowCompleted, `{"result": 1}`)
	write(all[8:11])
	requireHistory()
	require.Equal(t, 8, count(names.Event), "three boundaries were folded")
	require.Equal(t, 11, count(names.History), "the view has one row per event")

	// Pages: a boundary folded into a row is its own event; a page that
	// ends on it goes on with the command.
	page := func(after int64, limit int) (ids []int64) {
		t.Helper()
		events, err := st.Events(ctx, pool, runID, after, limit)
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
	_, err := pool.Exec(ctx, "UPDATE "+names.Event+" SET boundary = NULL WHERE run_id = $1 AND event_id = 11", runID)
	require.NoError(t, err)
	_, err = st.History(ctx, pool, runID)
	require.ErrorContains(t, err, "has a gap: event 11 at position 10")
	_, err = pool.Exec(ctx, "UPDATE "+names.Event+" SET boundary = $2 WHERE run_id = $1 AND event_id = 11", runID, boundary(1))
	require.NoError(t, err)
	all[9].Attributes = json.RawMessage(boundary(1))
	requireHistory()
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
	st := store.New(names)
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
			rows = slices.AppendSeq(rows, history.Rows(all[from:]))
			at = at.Add(time.Second)
		}
		insertRows(t, names, runID, append(slices.Collect(history.Rows(all[:1])), rows...))

		whole, err := st.History(ctx, pool, runID)
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
				page, err := st.Events(ctx, pool, runID, int64(after), limit)
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
