package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/task"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type orderArgs struct {
	ID    string `json:"id"`
	Cents int64  `json:"cents"`
}

func (orderArgs) Kind() string { return "order" }

type receipt struct {
	Charged int64 `json:"charged"`
}

type testBundle struct {
	client *client.Client
	names  *dbschema.Names
	pool   *pgxpool.Pool
	schema string
}

func setup(ctx context.Context, t *testing.T, config *client.Config) *testBundle {
	t.Helper()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	if config == nil {
		config = &client.Config{}
	}
	config.Schema = schema
	c, err := client.New(pool, config)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return &testBundle{client: c, names: dbschema.New(schema), pool: pool, schema: schema}
}

// closeRun ends a run the way a workflow task does: state, result, notify.
func closeRun(ctx context.Context, t *testing.T, b *testBundle, runID uuid.UUID, state string, result, failure []byte, notify bool) {
	t.Helper()
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "UPDATE "+b.names.Run+" SET state = $2, result = $3, failure = $4, closed_at = now() WHERE run_id = $1",
			runID, state, result, failure)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return errors.New("no such run")
		}
		if notify {
			_, err = tx.Exec(ctx, "SELECT pg_notify($1, $2)", dbschema.Channel(b.schema, dbschema.RunClosedChannel), runID.String())
		}
		return err
	})
	require.NoError(t, err)
}

func TestStart(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentStartsOneWins", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)

		const starters = 8
		runs := make([]*client.Run, starters)
		errs := make([]error, starters)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range starters {
			wg.Go(func() {
				<-start
				runs[i], errs[i] = b.client.Start(ctx, orderArgs{ID: "o-1"}, &client.StartOpts{
					WorkflowID: "order-o-1", RequestID: uuid.NewString(),
				})
			})
		}
		close(start)
		wg.Wait()

		var winner *client.Run
		for i := range starters {
			if errs[i] == nil {
				require.Nil(t, winner, "exactly one start creates a run")
				require.True(t, runs[i].Created)
				winner = runs[i]
			}
		}
		require.NotNil(t, winner)
		for i := range starters {
			if errs[i] == nil {
				continue
			}
			var started *client.WorkflowAlreadyStartedError
			require.ErrorAs(t, errs[i], &started)
			require.ErrorIs(t, errs[i], client.ErrWorkflowAlreadyStarted)
			require.Equal(t, "order-o-1", started.WorkflowID)
			require.Equal(t, winner.RunID, started.RunID)
			require.Equal(t, int64(1), started.Generation)
		}

		var runCount, taskCount int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.Run).Scan(&runCount))
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.RiverJob+" WHERE kind = $1", task.Kind("default", "order")).Scan(&taskCount))
		require.Equal(t, 1, runCount)
		require.Equal(t, 1, taskCount, "one workflow task queued")
	})

	t.Run("ConcurrentSameRequestIDReplays", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)

		const starters = 8
		runs := make([]*client.Run, starters)
		errs := make([]error, starters)
		var wg sync.WaitGroup
		for i := range starters {
			wg.Go(func() {
				runs[i], errs[i] = b.client.Start(ctx, orderArgs{ID: "o-2", Cents: 5}, &client.StartOpts{WorkflowID: "order-o-2", RequestID: "req-1"})
			})
		}
		wg.Wait()
		created := 0
		for i := range starters {
			require.NoError(t, errs[i])
			require.Equal(t, runs[0].RunID, runs[i].RunID)
			require.Equal(t, int64(1), runs[i].Generation)
			if runs[i].Created {
				created++
			}
		}
		require.Equal(t, 1, created)
	})

	t.Run("GenerationsAreMonotonic", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)

		var previous uuid.UUID
		for generation := int64(1); generation <= 3; generation++ {
			run, err := b.client.Start(ctx, orderArgs{ID: "o-3"}, &client.StartOpts{WorkflowID: "order-o-3"})
			require.NoError(t, err)
			require.Equal(t, generation, run.Generation)
			require.NotEqual(t, previous, run.RunID)
			previous = run.RunID
			closeRun(ctx, t, b, run.RunID, "completed", []byte(`{}`), nil, false)
		}

		// Retention deletes old runs; the counter row stays.
		_, err := b.pool.Exec(ctx, "DELETE FROM "+b.names.Run)
		require.NoError(t, err)
		run, err := b.client.Start(ctx, orderArgs{ID: "o-3"}, &client.StartOpts{WorkflowID: "order-o-3"})
		require.NoError(t, err)
		require.Equal(t, int64(4), run.Generation)
	})

	t.Run("InvalidInput", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)

		_, err := b.client.Start(ctx, nil, nil)
		require.Error(t, err)
		_, err = b.client.Start(ctx, badKindArgs{}, nil)
		require.ErrorContains(t, err, "invalid workflow kind")
		_, err = b.client.Start(ctx, orderArgs{}, &client.StartOpts{Namespace: "bad namespace"})
		require.ErrorContains(t, err, "invalid namespace")
		_, err = b.client.Start(ctx, unencodableArgs{}, nil)
		require.ErrorIs(t, err, client.ErrPayload)
	})

	t.Run("NamespacesIsolateWorkflowIDs", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)

		a, err := b.client.Start(ctx, orderArgs{ID: "o-4"}, &client.StartOpts{WorkflowID: "order-o-4", Namespace: "team-a"})
		require.NoError(t, err)
		other, err := b.client.Start(ctx, orderArgs{ID: "o-4"}, &client.StartOpts{WorkflowID: "order-o-4", Namespace: "team-b"})
		require.NoError(t, err)
		require.True(t, a.Created)
		require.True(t, other.Created)
		require.Equal(t, int64(1), other.Generation)
	})

	t.Run("RequestIDWithDifferentArgsConflicts", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)

		run, err := b.client.Start(ctx, orderArgs{ID: "o-5", Cents: 1}, &client.StartOpts{WorkflowID: "order-o-5", RequestID: "req-5"})
		require.NoError(t, err)
		_, err = b.client.Start(ctx, orderArgs{ID: "o-5", Cents: 2}, &client.StartOpts{WorkflowID: "order-o-5", RequestID: "req-5"})
		var conflict *client.RequestConflictError
		require.ErrorAs(t, err, &conflict)
		require.ErrorIs(t, err, client.ErrRequestConflict)
		require.Equal(t, run.RunID, conflict.RunID)
		require.Equal(t, "req-5", conflict.RequestID)

		// Still the same after the run closed: a request ID names one start.
		closeRun(ctx, t, b, run.RunID, "completed", []byte(`{}`), nil, false)
		again, err := b.client.Start(ctx, orderArgs{ID: "o-5", Cents: 1}, &client.StartOpts{WorkflowID: "order-o-5", RequestID: "req-5"})
		require.NoError(t, err)
		require.False(t, again.Created)
		require.Equal(t, run.RunID, again.RunID)
	})

	t.Run("StartTxIsAtomicWithCallerRows", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)
		orders := dbschema.Qualify(b.schema, "orders")
		// The test schema is reused across -count runs: a table of its own,
		// new each run.
		_, err := b.pool.Exec(ctx, "DROP TABLE IF EXISTS "+orders+"; CREATE TABLE "+orders+" (id text PRIMARY KEY)")
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = b.pool.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+orders) })

		// Rolled back: neither the caller's row nor the run exists.
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "INSERT INTO "+orders+" VALUES ('o-6')")
		require.NoError(t, err)
		run, err := b.client.StartTx(ctx, tx, orderArgs{ID: "o-6"}, &client.StartOpts{WorkflowID: "order-o-6"})
		require.NoError(t, err)

		var visible int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.Run+" WHERE run_id = $1", run.RunID).Scan(&visible))
		require.Zero(t, visible, "invisible to others before commit")
		require.NoError(t, tx.Rollback(ctx))

		var runs, jobs int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+b.names.Run+"), (SELECT count(*) FROM "+b.names.RiverJob+")").Scan(&runs, &jobs))
		require.Zero(t, runs)
		require.Zero(t, jobs)

		// Committed: both exist, and the workflow ID is free again for a
		// fresh start because the rolled-back run never existed.
		err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+orders+" VALUES ('o-6')"); err != nil {
				return err
			}
			run, err = b.client.StartTx(ctx, tx, orderArgs{ID: "o-6"}, &client.StartOpts{WorkflowID: "order-o-6"})
			return err
		})
		require.NoError(t, err)
		require.Equal(t, int64(1), run.Generation, "the rolled-back generation was never allocated")
		var taskJobID int64
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT task_job_id FROM "+b.names.Run+" WHERE run_id = $1", run.RunID).Scan(&taskJobID))
		var kind, state string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT kind, state FROM "+b.names.RiverJob+" WHERE id = $1", taskJobID).Scan(&kind, &state))
		require.Equal(t, task.Kind("default", "order"), kind)
		require.Equal(t, "available", state)
	})
}

type badKindArgs struct{}

func (badKindArgs) Kind() string { return "has space" }

type unencodableArgs struct {
	C chan int `json:"c"`
}

func (unencodableArgs) Kind() string { return "unencodable" }

func TestGet(t *testing.T) {
	t.Parallel()

	t.Run("CompletedResult", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		// A long poll interval: only the notification can end Get in time.
		b := setup(ctx, t, &client.Config{PollInterval: time.Hour})
		run, err := b.client.Start(ctx, orderArgs{ID: "o-7"}, nil)
		require.NoError(t, err)

		results := make(chan error, 1)
		var got receipt
		go func() { results <- run.Get(ctx, &got) }()
		select {
		case err := <-results:
			t.Fatalf("Get returned before the run closed: %v", err)
		case <-time.After(100 * time.Millisecond):
		}

		closeRun(ctx, t, b, run.RunID, "completed", []byte(`{"charged":42}`), nil, true)
		select {
		case err := <-results:
			require.NoError(t, err)
			require.Equal(t, receipt{Charged: 42}, got)
		case <-time.After(30 * time.Second):
			t.Fatal("Get did not return after the run closed")
		}

		typed, err := client.GetResult[receipt](ctx, run)
		require.NoError(t, err)
		require.Equal(t, int64(42), typed.Charged)
	})

	t.Run("FailedRun", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)
		run, err := b.client.Start(ctx, orderArgs{ID: "o-8"}, nil)
		require.NoError(t, err)
		closeRun(ctx, t, b, run.RunID, "failed", nil, []byte(`{"message":"card declined","type":"CardError"}`), true)

		err = run.Get(ctx, nil)
		var failed *client.WorkflowFailedError
		require.ErrorAs(t, err, &failed)
		require.ErrorIs(t, err, client.ErrWorkflowFailed)
		require.Equal(t, run.RunID, failed.RunID)
		require.Equal(t, "failed", failed.State)
		var failure *client.Failure
		require.ErrorAs(t, err, &failure)
		require.Equal(t, "CardError", failure.Type)
		require.Equal(t, "card declined", failure.Message)
	})

	t.Run("LatestRunOfWorkflowID", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)
		run, err := b.client.Start(ctx, orderArgs{ID: "o-11"}, &client.StartOpts{WorkflowID: "latest"})
		require.NoError(t, err)
		closeRun(ctx, t, b, run.RunID, "completed", []byte(`{"charged":11}`), nil, true)

		// uuid.Nil means the workflow's latest run, as in every other call.
		got, err := client.GetResult[receipt](ctx, b.client.GetRun("latest", uuid.Nil))
		require.NoError(t, err)
		require.Equal(t, int64(11), got.Charged)
		err = b.client.GetRun("nope", uuid.Nil).Get(ctx, nil)
		require.ErrorIs(t, err, client.ErrRunNotFound)
	})

	t.Run("ManyWaitersShareOneListener", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, &client.Config{PollInterval: time.Hour})

		const count = 50
		runs := make([]*client.Run, count)
		for i := range runs {
			var err error
			runs[i], err = b.client.Start(ctx, orderArgs{ID: "many"}, nil)
			require.NoError(t, err)
		}
		errs := make(chan error, count)
		for _, run := range runs {
			go func() { errs <- run.Get(ctx, nil) }()
		}

		// However many waiters, one backend LISTENs for this client.
		listening := func() int {
			var n int
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE $1",
				"LISTEN \""+b.schema+".%").Scan(&n))
			return n
		}
		deadline := time.Now().Add(10 * time.Second)
		for listening() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) //nolint:forbidigo // polling a condition with a deadline
		}
		require.Equal(t, 1, listening())
		for _, run := range runs {
			closeRun(ctx, t, b, run.RunID, "completed", []byte(`null`), nil, true)
		}
		for range count {
			select {
			case err := <-errs:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Fatal("a waiter never returned")
			}
		}
	})

	t.Run("PollingFindsCloseWithoutNotification", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, &client.Config{PollInterval: 20 * time.Millisecond})
		run, err := b.client.Start(ctx, orderArgs{ID: "o-9"}, nil)
		require.NoError(t, err)

		results := make(chan error, 1)
		go func() { results <- run.Get(ctx, nil) }()
		closeRun(ctx, t, b, run.RunID, "completed", []byte(`null`), nil, false)
		select {
		case err := <-results:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("polling never found the closed run")
		}
	})

	t.Run("RunNotFound", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)
		err := b.client.GetRun("nope", uuid.New()).Get(ctx, nil)
		require.ErrorIs(t, err, client.ErrRunNotFound)
	})

	t.Run("ContextEnds", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)
		run, err := b.client.Start(ctx, orderArgs{ID: "o-10"}, nil)
		require.NoError(t, err)
		shortCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, run.Get(shortCtx, nil), context.DeadlineExceeded)
	})
}

func TestRawArgs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t, nil)

	typed, err := b.client.Start(ctx, orderArgs{ID: "raw", Cents: 7}, &client.StartOpts{WorkflowID: "raw-1", RequestID: "r"})
	require.NoError(t, err)
	// The same start as raw JSON is the same request: an idempotent replay.
	raw, err := b.client.Start(ctx, client.RawArgs{JSON: []byte(`{"id":"raw","cents":7}`), KindName: "order"},
		&client.StartOpts{WorkflowID: "raw-1", RequestID: "r"})
	require.NoError(t, err)
	require.False(t, raw.Created)
	require.Equal(t, typed.RunID, raw.RunID)

	_, err = b.client.Start(ctx, client.RawArgs{JSON: []byte(`{not json`), KindName: "order"}, nil)
	require.ErrorIs(t, err, client.ErrPayload)
}
