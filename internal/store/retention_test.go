package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/engine"
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/inbox"
	"github.com/weirhq/weir/internal/store"
)

// runRows are the tables whose rows belong to a run, by run_id, with no
// foreign key to weir_run: whoever deletes a run deletes its rows.
func runRows(n *dbschema.Names) []string {
	return []string{n.Event, n.Activity, n.Inbox, n.Query, n.Update}
}

// retentionFixture is a migrated schema with a run in every state
// retention distinguishes, each with a row in every table of runRows.
type retentionFixture struct {
	pool                  *pgxpool.Pool
	names                 *dbschema.Names
	st                    *store.Store
	expired, recent, live uuid.UUID
}

func newRetentionFixture(t *testing.T) *retentionFixture {
	t.Helper()
	ctx := t.Context()
	f := &retentionFixture{pool: dbtest.Pool(ctx, t), names: dbschema.New(dbtest.TestSchema(ctx, t))}
	f.st = store.New(f.names)
	f.expired = f.run(t, "expired", "now() - interval '2 hours'")
	f.recent = f.run(t, "recent", "now()")
	f.live = f.run(t, "live", "")
	return f
}

// run inserts a run closed at closedAt (SQL; empty: running) and a row of
// its in every table of runRows.
func (f *retentionFixture) run(t *testing.T, workflowID, closedAt string) uuid.UUID {
	t.Helper()
	ctx := t.Context()
	runID := uuid.New()
	state, closed := "'running'", "NULL"
	if closedAt != "" {
		state, closed = "'completed'", closedAt
	}
	n := f.names
	_, err := f.pool.Exec(ctx, "INSERT INTO "+n.Workflow+" (namespace, workflow_id, last_generation) VALUES ('default', $1, 1)", workflowID)
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, "INSERT INTO "+n.Run+" (run_id, namespace, workflow_id, generation, kind, queue, args, request_id, request_hash, state, closed_at)"+
		" VALUES ($1, 'default', $2, 1, 'k', 'default', '\\x', 'r', '\\x', "+state+", "+closed+")", runID, workflowID)
	require.NoError(t, err)
	for _, sql := range []string{
		"INSERT INTO " + n.Event + " (run_id, event_id, type) VALUES ($1, 1, 'WorkflowStarted')",
		"INSERT INTO " + n.Activity + " (run_id, scheduled_event_id, job_id, kind) VALUES ($1, 2, 1, 'a')",
		"INSERT INTO " + n.Inbox + " (run_id, type, dedup_key) VALUES ($1, 'SignalReceived', 'signal:1')",
		"INSERT INTO " + n.Query + " (run_id, namespace, workflow_kind, kind, expires_at) VALUES ($1, 'default', 'k', 'q', now() + interval '1 hour')",
		"INSERT INTO " + n.Update + " (run_id, update_id, kind) VALUES ($1, 'u', 'k')",
	} {
		_, err := f.pool.Exec(ctx, sql, runID)
		require.NoError(t, err)
	}
	return runID
}

// rows counts runID's run row and its rows in every table of runRows.
func (f *retentionFixture) rows(t *testing.T, runID uuid.UUID) int {
	t.Helper()
	total := 0
	for _, table := range append(runRows(f.names), f.names.Run) {
		var n int
		require.NoError(t, f.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table+" WHERE run_id = $1", runID).Scan(&n))
		total += n
	}
	return total
}

// requireNoOrphans checks that every row of every table of runRows has
// its run.
func (f *retentionFixture) requireNoOrphans(t *testing.T) {
	t.Helper()
	for _, table := range runRows(f.names) {
		var n int
		require.NoError(t, f.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table+" c"+
			" WHERE NOT EXISTS (SELECT 1 FROM "+f.names.Run+" r WHERE r.run_id = c.run_id)").Scan(&n))
		require.Zero(t, n, "rows of %s without their run", table)
	}
}

func (f *retentionFixture) expire(ctx context.Context, t *testing.T) int64 {
	t.Helper()
	var deleted int64
	require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) (err error) {
		deleted, err = f.st.ExpireRuns(ctx, tx, time.Hour, 100)
		return err
	}))
	return deleted
}

// TestExpireRunsTakesEveryRow: retention deletes a run past it with its
// rows in every table of runRows, and leaves the other runs' alone.
func TestExpireRunsTakesEveryRow(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newRetentionFixture(t)
	require.Equal(t, 6, f.rows(t, f.expired))

	require.Equal(t, int64(1), f.expire(ctx, t))
	require.Zero(t, f.rows(t, f.expired))
	require.Equal(t, 6, f.rows(t, f.recent), "a run closed within retention stays whole")
	require.Equal(t, 6, f.rows(t, f.live), "a live run stays whole")
	f.requireNoOrphans(t)
	require.Zero(t, f.expire(ctx, t))
}

// TestQueryWaitsForRetention: a query asked of a run that retention has
// locked to delete waits for it and then finds no run; one asked first
// holds the run until it commits, and retention takes both after.
func TestQueryWaitsForRetention(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newRetentionFixture(t)
	ask := store.AskQueryParams{RunID: f.expired, Kind: "q", Timeout: time.Hour}

	// Retention first: the ask waits for its lock, then finds no run.
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	deleted, err := f.st.ExpireRuns(ctx, tx, time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, int64(1), deleted)
	asked := make(chan error, 1)
	go func() {
		_, err := f.st.AskQuery(ctx, f.pool, ask)
		asked <- err
	}()
	requireWaitingOnLock(ctx, t, f.pool, f.names.Query, asked)
	require.NoError(t, tx.Commit(ctx))
	require.ErrorIs(t, <-asked, pgx.ErrNoRows)
	require.Zero(t, f.rows(t, f.expired))
	f.requireNoOrphans(t)

	// The ask first: retention skips the run until the ask commits.
	ask.RunID = f.run(t, "expired-2", "now() - interval '2 hours'")
	askTx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = askTx.Rollback(ctx) }()
	_, err = f.st.AskQuery(ctx, askTx, ask)
	require.NoError(t, err)
	require.Zero(t, f.expire(ctx, t), "retention took a run a query held")
	require.NoError(t, askTx.Commit(ctx))
	require.Equal(t, int64(1), f.expire(ctx, t))
	require.Zero(t, f.rows(t, ask.RunID))
	f.requireNoOrphans(t)
}

// requireWaitingOnLock waits until a statement on table waits for a lock;
// it fails if done delivers first (the statement did not wait).
func requireWaitingOnLock(ctx context.Context, t *testing.T, pool *pgxpool.Pool, table string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity"+
			" WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0)", table).Scan(&waiting))
		if waiting {
			return
		}
		select {
		case err := <-done:
			require.FailNow(t, "the statement did not wait for the lock", "it returned %v", err)
		default:
		}
		require.True(t, time.Now().Before(deadline), "no statement on %s waited for a lock", table)
		time.Sleep(5 * time.Millisecond)
	}
}

// TestNoRowsWithoutRun: the writers of a run's rows write nothing for a
// run that does not exist (one that retention deleted): a step's events
// and activity records fail with its CAS, in its transaction; an inbox item
// or an update is refused by the delivery that locks the run; a query finds
// no run.
func TestNoRowsWithoutRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newRetentionFixture(t)
	require.Equal(t, int64(1), f.expire(ctx, t))
	gone := f.expired

	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		f.st.QueueStep(batch, &engine.StepWrites{
			RunID: gone,
			Events: []history.Event{{
				ID: 2, Type: history.EventActivityScheduled, Attributes: []byte("{}"), Time: time.Now(),
			}},
			Activities: []engine.Activity{{ScheduledEventID: 2, JobID: 7, Kind: "a"}},
			CAS:        &engine.RunCAS{Found: 2, Next: 3},
		})
		return tx.SendBatch(ctx, batch).Close()
	})
	require.ErrorIs(t, err, store.ErrRunMoved)

	err = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		requested, err := f.st.RequestUpdate(ctx, tx, store.UpdateKey{RunID: gone, UpdateID: "u2"}, "k")
		require.NoError(t, err)
		require.True(t, requested)
		_, err = inbox.Deliver(ctx, tx, f.st, nil, gone, &inbox.Item{Attributes: []byte("{}"), DedupKey: "update:u2", Type: "UpdateAccepted"})
		return err
	})
	require.ErrorIs(t, err, inbox.ErrRunClosed)

	_, err = f.st.AskQuery(ctx, f.pool, store.AskQueryParams{RunID: gone, Kind: "q", Timeout: time.Hour})
	require.True(t, errors.Is(err, pgx.ErrNoRows), "%v", err)

	require.Zero(t, f.rows(t, gone))
	f.requireNoOrphans(t)
}
