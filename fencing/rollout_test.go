package fencing_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
)

// mainOnlySchema returns a schema with River's tables but without the
// fencing migration, and a function that applies it.
func mainOnlySchema(ctx context.Context, t *testing.T, pool *pgxpool.Pool) (string, func()) {
	t.Helper()
	schema := dbtest.EmptySchema(ctx, t)
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	require.NoError(t, err)
	_, err = migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineMain})
	require.NoError(t, err)
	return schema, func() {
		t.Helper()
		// Through rivermigrate and the fencing driver, as a River user would.
		driver := newDriver(t, pool, nil, nil)
		migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Line: fencing.MigrationLine, Schema: schema})
		require.NoError(t, err)
		res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
		require.NoError(t, err)
		require.Len(t, res.Versions, len(migrator.AllVersions()), "every fencing version")
	}
}

// TestRollout covers F5.
func TestRollout(t *testing.T) {
	t.Parallel()

	t.Run("FencedClientAcrossMigration", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema, migrate := mainOnlySchema(ctx, t, pool)
		sink := newEventSink()
		driver := newDriver(t, pool, sink, nil)
		worker := newBlockWorker(t)
		client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, maxWorkers: 2, worker: worker})

		fenced, err := driver.Fenced(ctx, schema)
		require.NoError(t, err)
		require.False(t, fenced, "readiness reports that fencing is not active yet")

		// Before the migration the plugin and pilot work like plain River.
		before, err := client.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		attempt1 := recv(t, worker.started)
		lease, ok := fencing.LeaseFromContext(attempt1.ctx)
		require.True(t, ok)
		require.Empty(t, lease.Token)
		require.True(t, lease.ExpiresAt.IsZero())

		migrate()
		waitUntil(t, "fencing is active", func() bool {
			fenced, err := driver.Fenced(ctx, schema)
			require.NoError(t, err)
			return fenced
		})
		row := getJob(ctx, t, pool, schema, before.Job.ID)
		require.False(t, row.LeaseExpiresAt.Valid, "a job running before the migration gets no lease")

		// After the migration, new fetches are fenced...
		after, err := client.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		attempt2 := recv(t, worker.started)
		require.Equal(t, after.Job.ID, attempt2.job.ID)
		lease, ok = fencing.LeaseFromContext(attempt2.ctx)
		require.True(t, ok)
		require.NotEmpty(t, lease.Token)
		require.False(t, lease.ExpiresAt.IsZero())

		// ...and the attempt fetched before it proves itself by (attempt,
		// attempted_at) and completes normally.
		attempt1.release <- complete
		attempt2.release <- complete
		waitForState(ctx, t, pool, schema, before.Job.ID, "completed")
		waitForState(ctx, t, pool, schema, after.Job.ID, "completed")
		require.Zero(t, sink.count(fencing.EventStaleWriteRejected, 0))
	})

	t.Run("MigrationIsIdempotentAndConcurrent", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema, migrate := mainOnlySchema(ctx, t, pool)

		up, err := fs.ReadFile(migrations.FS(migrations.LineFencing), "migration/fencing/001_lease.up.sql")
		require.NoError(t, err)
		sql := strings.ReplaceAll(string(up), "/* TEMPLATE: schema */", pgx.Identifier{schema}.Sanitize()+".")
		applyRaw := func() error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			if _, err := tx.Exec(ctx, sql); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}

		// Two sessions apply the up step at the same moment: the first lock
		// on river_job serialises them, and the second finds everything done.
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- applyRaw() }()
		}
		require.NoError(t, recv(t, errs))
		require.NoError(t, recv(t, errs))

		// And again on a migrated schema, through rivermigrate this time.
		migrate()
		require.NoError(t, applyRaw())

		// rivermigrate through the fencing driver finds nothing left to do.
		migrator, err := rivermigrate.New(newDriver(t, pool, nil, nil), &rivermigrate.Config{Line: fencing.MigrationLine, Schema: schema})
		require.NoError(t, err)
		res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
		require.NoError(t, err)
		require.Empty(t, res.Versions)
		require.Contains(t, migrator.AllVersions()[0].Name, "lease")
	})

	t.Run("PlainClientJobsAreNotReaped", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		worker := newBlockWorker(t)
		// An old, unfenced fleet member.
		plain := startClient(ctx, t, pool, schema, &clientOpts{noLeader: true, worker: worker})
		inserted, err := plain.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		attempt := recv(t, worker.started)

		row := getJob(ctx, t, pool, schema, inserted.Job.ID)
		require.True(t, row.LeaseToken.Valid, "the trigger mints a token for any fetch")
		require.False(t, row.LeaseExpiresAt.Valid, "only a fenced fetch starts a lease")

		// A fenced leader's reaper leaves it alone: River's rules apply.
		driver := newDriver(t, pool, nil, nil)
		startClient(ctx, t, pool, schema, &clientOpts{driver: driver, maxWorkers: 2, worker: worker})
		driver.NoteSchema(schema)
		for range 3 {
			reaped, err := driver.ReapNow(ctx)
			require.NoError(t, err)
			require.Zero(t, reaped)
		}
		require.Equal(t, "running", getJob(ctx, t, pool, schema, inserted.Job.ID).State)

		attempt.release <- complete
		waitForState(ctx, t, pool, schema, inserted.Job.ID, "completed")
		select {
		case other := <-worker.started:
			t.Fatalf("job fetched again as attempt %d", other.job.Attempt)
		default:
		}
	})

	t.Run("RunningBeforeMigrationIsNotRedequeued", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema, migrate := mainOnlySchema(ctx, t, pool)
		worker := newBlockWorker(t)
		plain := startClient(ctx, t, pool, schema, &clientOpts{noLeader: true, worker: worker})
		inserted, err := plain.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		attempt := recv(t, worker.started)

		// The migration runs on a river_job with a running row.
		migrate()
		row := getJob(ctx, t, pool, schema, inserted.Job.ID)
		require.Equal(t, "running", row.State)
		require.False(t, row.LeaseToken.Valid)
		require.False(t, row.LeaseExpiresAt.Valid)

		driver := newDriver(t, pool, nil, nil)
		startClient(ctx, t, pool, schema, &clientOpts{driver: driver, maxWorkers: 2, worker: worker})
		driver.NoteSchema(schema)
		for range 3 {
			reaped, err := driver.ReapNow(ctx)
			require.NoError(t, err)
			require.Zero(t, reaped)
		}
		require.Equal(t, 1, getJob(ctx, t, pool, schema, inserted.Job.ID).Attempt)

		attempt.release <- complete
		waitForState(ctx, t, pool, schema, inserted.Job.ID, "completed")
		select {
		case other := <-worker.started:
			t.Fatalf("job fetched again as attempt %d", other.job.Attempt)
		default:
		}
		var logged int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "weir_job_attempt"}.Sanitize()+
			" WHERE job_id = $1 AND lease_token IS NULL AND outcome = 'completed'", inserted.Job.ID).Scan(&logged))
		require.Equal(t, 1, logged, "the pre-migration attempt is logged without a token")
	})
}

type completeTxArgs struct{}

func (completeTxArgs) Kind() string { return "fencing_complete_tx" }

type completeTxWorker struct {
	river.WorkerDefaults[completeTxArgs]
	tx pgx.Tx
}

func (w *completeTxWorker) Work(ctx context.Context, job *river.Job[completeTxArgs]) error {
	_, err := river.JobCompleteTx[*fencing.Driver](ctx, w.tx, job)
	return err
}

// TestRivertestWorker (F5): an existing rivertest.Worker test keeps passing
// on the fencing driver, JobCompleteTx included.
func TestRivertestWorker(t *testing.T) {
	t.Parallel()

	t.Run("Completes", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		driver := newDriver(t, dbtest.Pool(ctx, t), nil, nil)
		worker := rivertest.NewWorker(t, driver, &river.Config{Plugins: []rivertype.Plugin{driver.Plugin()}}, &noopWorker{})
		res, err := worker.Work(ctx, t, dbtest.TestTx(ctx, t), noopArgs{}, nil)
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobCompleted, res.EventKind)
		require.Equal(t, rivertype.JobStateCompleted, res.Job.State)
	})

	t.Run("JobCompleteTx", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		driver := newDriver(t, dbtest.Pool(ctx, t), nil, nil)
		tx := dbtest.TestTx(ctx, t)
		worker := rivertest.NewWorker(t, driver, &river.Config{Plugins: []rivertype.Plugin{driver.Plugin()}}, &completeTxWorker{tx: tx})
		res, err := worker.Work(ctx, t, tx, completeTxArgs{}, nil)
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobCompleted, res.EventKind)
		require.Equal(t, rivertype.JobStateCompleted, res.Job.State)
	})
}
