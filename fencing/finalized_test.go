package fencing_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
)

// TestOnFinalized checks that the hook runs in the transaction of the state
// change: its writes commit with the final state, once per job, and never
// for a stale write.
func TestOnFinalized(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	marks := pgx.Identifier{schema, "finalized_marks"}.Sanitize()
	_, err := pool.Exec(ctx, "CREATE TABLE "+marks+" (job_id bigint NOT NULL, state text NOT NULL)")
	require.NoError(t, err)
	// The schema goes back to dbtest's pool for the next test: without its
	// table.
	t.Cleanup(func() {
		_, err := pool.Exec(context.WithoutCancel(ctx), "DROP TABLE "+marks)
		require.NoError(t, err)
	})

	var (
		mu      sync.Mutex
		schemas []string
	)
	config := &fencing.Config{LeaseTTL: 3 * time.Second, HeartbeatInterval: 200 * time.Millisecond, ReaperInterval: 100 * time.Millisecond}
	config.OnFinalized = func(ctx context.Context, tx pgx.Tx, hookSchema string, jobIDs []int64) error {
		mu.Lock()
		schemas = append(schemas, hookSchema)
		mu.Unlock()
		_, err := tx.Exec(ctx, "INSERT INTO "+marks+" (job_id, state) SELECT id, state::text FROM "+
			pgx.Identifier{schema, "river_job"}.Sanitize()+" WHERE id = ANY($1)", jobIDs)
		return err
	}
	driver := newDriver(t, pool, nil, config)
	worker := newBlockWorker(t)
	client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, maxWorkers: 5, worker: worker})

	marked := func(id int64) []string {
		rows, err := pool.Query(ctx, "SELECT state FROM "+marks+" WHERE job_id = $1", id)
		require.NoError(t, err)
		states, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return states
	}

	t.Run("CompletedAndDiscarded", func(t *testing.T) {
		completed, err := client.Insert(ctx, blockArgs{Tag: "ok"}, nil)
		require.NoError(t, err)
		recv(t, worker.started).release <- complete
		waitForState(ctx, t, pool, schema, completed.Job.ID, "completed")
		waitUntil(t, "the hook ran for the completed job", func() bool { return len(marked(completed.Job.ID)) == 1 })
		require.Equal(t, []string{"completed"}, marked(completed.Job.ID), "the hook saw the final state, in the same transaction")

		discarded, err := client.Insert(ctx, blockArgs{Tag: "fail"}, &river.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		recv(t, worker.started).release <- func(context.Context, *river.Job[blockArgs]) error { return errors.New("boom") }
		waitForState(ctx, t, pool, schema, discarded.Job.ID, "discarded")
		waitUntil(t, "the hook ran for the discarded job", func() bool { return len(marked(discarded.Job.ID)) == 1 })
	})

	t.Run("StaleWriteDoesNotFinalize", func(t *testing.T) {
		inserted, err := client.Insert(ctx, blockArgs{Tag: "stale"}, nil)
		require.NoError(t, err)
		first := recv(t, worker.started)
		rescue(ctx, t, pool, schema, inserted.Job.ID)
		second := recv(t, worker.started)

		first.release <- complete // stale: rejected, no hook
		waitUntil(t, "the stale completion was rejected", func() bool { return driver.Stats().StaleWritesRejected > 0 })
		require.Empty(t, marked(inserted.Job.ID))

		second.release <- complete
		waitForState(ctx, t, pool, schema, inserted.Job.ID, "completed")
		waitUntil(t, "the hook ran once for the current attempt", func() bool { return len(marked(inserted.Job.ID)) == 1 })

		mu.Lock()
		defer mu.Unlock()
		for _, s := range schemas {
			require.Equal(t, schema, s, "the hook is told River's schema")
		}
	})
}
