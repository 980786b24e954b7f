package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
)

// searchPathClient is a client configured with Schema "" on a pool whose
// search_path resolves "" to schema.
func searchPathClient(ctx context.Context, t *testing.T, schema string) *client.Client {
	t.Helper()
	config, err := pgxpool.ParseConfig(dbtest.URL(ctx, t))
	require.NoError(t, err)
	config.MaxConns = 4
	config.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, config)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := client.New(pool, &client.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// waitForLockWaiter waits until a session waits for the advisory lock of
// key (a bigint key: classid holds its high half, objid its low half).
func waitForLockWaiter(ctx context.Context, t *testing.T, pool *pgxpool.Pool, key int64) {
	t.Helper()
	waitFor(ctx, t, pool, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1"+
		" AND (classid::bigint << 32 | objid::bigint) = $1", key)
}

// waitForTxWaiter waits until a session waits for transaction tx to end.
func waitForTxWaiter(ctx context.Context, t *testing.T, pool *pgxpool.Pool, tx pgx.Tx) {
	t.Helper()
	var xid string
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&xid))
	waitFor(ctx, t, pool, "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted AND transactionid::text = $1", xid)
}

func waitFor(ctx context.Context, t *testing.T, pool *pgxpool.Pool, countSQL string, arg any) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, pool.QueryRow(ctx, countSQL, arg).Scan(&waiting))
		return waiting > 0
	}, 20*time.Second, 10*time.Millisecond, "no session waits: %s", countSQL)
}

type startResult struct {
	run *client.Run
	err error
}

func TestStartLock(t *testing.T) {
	t.Parallel()

	// A client naming the schema and one reaching it through the
	// search_path ("") take one start lock: the second start waits for the
	// first one's transaction, then replays it.
	t.Run("ResolvedSchema", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)
		unnamed := searchPathClient(ctx, t, b.schema)
		opts := &client.StartOpts{WorkflowID: "lock-" + uuid.NewString(), RequestID: "req-1"}

		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		first, err := b.client.StartTx(ctx, tx, orderArgs{ID: "o1", Cents: 100}, opts)
		require.NoError(t, err)

		done := make(chan startResult, 1)
		go func() {
			run, err := unnamed.Start(ctx, orderArgs{ID: "o1", Cents: 100}, opts)
			done <- startResult{run, err}
		}()
		var key int64
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT "+dbschema.StartLockSQL("$1", "$2", "$3"),
			b.schema, "default", opts.WorkflowID).Scan(&key))
		// The lock's name across versions.
		var named int64
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT hashtextextended($1, 0)",
			"weir.start\x1f"+b.schema+"\x1fdefault\x1f"+opts.WorkflowID).Scan(&named))
		require.Equal(t, named, key)
		waitForLockWaiter(ctx, t, b.pool, key)
		require.NoError(t, tx.Commit(ctx))

		got := <-done
		require.NoError(t, got.err)
		require.Equal(t, first.RunID, got.run.RunID)
		require.Equal(t, int64(1), got.run.Generation)
		require.False(t, got.run.Created)
	})
}

// TestStartCollision: a start that met the unique index of a run that a
// writer without the start lock (an older build, say) committed meanwhile
// answers as its lookup would have: a replay of its request, or a refusal
// naming the live run, never a zero run ID.
func TestStartCollision(t *testing.T) {
	t.Parallel()

	// bypassLock inserts, in a transaction left open and without the start
	// lock, a live run of workflowID copied from run source (same args and
	// request), as an older build's start would.
	bypassLock := func(ctx context.Context, t *testing.T, b *testBundle, source uuid.UUID, workflowID string) (pgx.Tx, uuid.UUID) {
		t.Helper()
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
		_, err = tx.Exec(ctx, "INSERT INTO "+b.names.Workflow+" (namespace, workflow_id, last_generation) VALUES ('default', $1, 1)", workflowID)
		require.NoError(t, err)
		var runID uuid.UUID
		err = tx.QueryRow(ctx, "INSERT INTO "+b.names.Run+
			" (run_id, namespace, workflow_id, generation, kind, queue, args, request_id, request_hash)"+
			" SELECT gen_random_uuid(), namespace, $2, 1, kind, queue, args, request_id, request_hash FROM "+b.names.Run+
			" WHERE run_id = $1 RETURNING run_id", source, workflowID).Scan(&runID)
		require.NoError(t, err)
		return tx, runID
	}
	args := orderArgs{ID: "o2", Cents: 200}
	// startIntoCollision starts args with requestID while another
	// transaction, bypassing the start lock, holds a run of the same
	// workflow ID (started as "req-a") that it then commits; it returns the
	// start's result and that run's ID.
	startIntoCollision := func(t *testing.T, requestID string) (startResult, uuid.UUID) {
		t.Helper()
		ctx := t.Context()
		b := setup(ctx, t, nil)
		source, err := b.client.Start(ctx, args, &client.StartOpts{RequestID: "req-a"})
		require.NoError(t, err)
		workflowID := "collide-" + uuid.NewString()
		tx, runID := bypassLock(ctx, t, b, source.RunID, workflowID)

		done := make(chan startResult, 1)
		go func() {
			run, err := b.client.Start(ctx, args, &client.StartOpts{WorkflowID: workflowID, RequestID: requestID})
			done <- startResult{run, err}
		}()
		waitForTxWaiter(ctx, t, b.pool, tx)
		require.NoError(t, tx.Commit(ctx))
		return <-done, runID
	}

	t.Run("OtherRequestIsRefusedWithTheRun", func(t *testing.T) {
		t.Parallel()
		got, runID := startIntoCollision(t, "req-b")
		started, ok := errors.AsType[*client.WorkflowAlreadyStartedError](got.err)
		require.True(t, ok, "got %v", got.err)
		require.Equal(t, runID, started.RunID)
		require.Equal(t, int64(1), started.Generation)
	})

	t.Run("SameRequestReplays", func(t *testing.T) {
		t.Parallel()
		got, runID := startIntoCollision(t, "req-a")
		require.NoError(t, got.err)
		require.Equal(t, runID, got.run.RunID)
		require.Equal(t, int64(1), got.run.Generation)
		require.False(t, got.run.Created)
	})

	t.Run("SameRequestInCallersTxNamesTheRun", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)
		source, err := b.client.Start(ctx, args, &client.StartOpts{RequestID: "req-a"})
		require.NoError(t, err)
		workflowID := "collide-" + uuid.NewString()
		tx, runID := bypassLock(ctx, t, b, source.RunID, workflowID)

		done := make(chan startResult, 1)
		go func() {
			err := pgx.BeginFunc(ctx, b.pool, func(callerTx pgx.Tx) error {
				_, err := b.client.StartTx(ctx, callerTx, args, &client.StartOpts{WorkflowID: workflowID, RequestID: "req-a"})
				return err
			})
			done <- startResult{nil, err}
		}()
		waitForTxWaiter(ctx, t, b.pool, tx)
		require.NoError(t, tx.Commit(ctx))

		got := <-done
		started, ok := errors.AsType[*client.WorkflowAlreadyStartedError](got.err)
		require.True(t, ok, "got %v", got.err)
		require.Equal(t, runID, started.RunID)
	})
}
