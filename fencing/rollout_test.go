package fencing_test

import (
	"context"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
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
		// A fetch that checked for fencing before the migration may still
		// be running (and fetch unfenced, as a plain River client would);
		// River's producer fetches one at a time, so once another fetch
		// began, every fetch checks after the migration.
		fetches, _ := driver.PilotCalls()
		waitUntil(t, "a fetch after the migration", func() bool {
			now, _ := driver.PilotCalls()
			return now > fetches
		})

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

	// F5: the migration is idempotent and safe to run concurrently. Every
	// fencing up step, run from several sessions at the same moment (each in
	// a transaction of its own, without weir's migration lock, as another
	// tool might run it), and the latest step run once more on top, must
	// leave exactly the schema that one run through rivermigrate leaves, and
	// a working lease.
	t.Run("MigrationIsIdempotentAndConcurrent", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)

		reference, migrateReference := mainOnlySchema(ctx, t, pool)
		migrateReference()
		want := fencingSchemaObjects(ctx, t, pool, reference)
		require.NotEmpty(t, want.triggers)
		// rivermigrate through the fencing driver then finds nothing left to
		// do, and changes nothing.
		migrator, err := rivermigrate.New(newDriver(t, pool, nil, nil), &rivermigrate.Config{Line: fencing.MigrationLine, Schema: reference})
		require.NoError(t, err)
		res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
		require.NoError(t, err)
		require.Empty(t, res.Versions)
		require.Equal(t, want, fencingSchemaObjects(ctx, t, pool, reference))

		schema, _ := mainOnlySchema(ctx, t, pool)
		steps := fencingUpSteps(t, schema)
		require.Len(t, steps, len(migrator.AllVersions()))
		applyRaw := func(sql string) error {
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
		const sessions = 4
		for i, sql := range steps {
			// The first lock on river_job serialises the sessions; the later
			// ones find everything done.
			start := make(chan struct{})
			errs := make(chan error, sessions)
			for range sessions {
				go func() {
					<-start
					errs <- applyRaw(sql)
				}()
			}
			close(start)
			for range sessions {
				require.NoError(t, recv(t, errs), "step %d", i+1)
			}
		}
		require.Equal(t, want, fencingSchemaObjects(ctx, t, pool, schema), "concurrent runs leave what one run leaves")
		require.NoError(t, applyRaw(steps[len(steps)-1]), "the latest step again")
		require.Equal(t, want, fencingSchemaObjects(ctx, t, pool, schema), "a second run changes nothing")

		requireLeaseWorks(ctx, t, pool, schema)
		requireLeaseWorks(ctx, t, pool, reference)
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
		// The pre-migration attempt, which held no token, completed the job
		// and stays on its row (fencing 003): no token, nothing logged.
		row = getJob(ctx, t, pool, schema, inserted.Job.ID)
		require.False(t, row.LeaseLastToken.Valid, "the pre-migration attempt held no token")
		require.Zero(t, loggedRows(ctx, t, pool, schema, inserted.Job.ID))
	})
}

// fencingUpSteps returns the SQL of every fencing up step, in version order,
// for schema.
func fencingUpSteps(t *testing.T, schema string) []string {
	t.Helper()
	migrationFS := migrations.FS(migrations.LineFencing)
	names, err := fs.Glob(migrationFS, "migration/fencing/*.up.sql")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	slices.Sort(names)
	steps := make([]string, 0, len(names))
	for _, name := range names {
		up, err := fs.ReadFile(migrationFS, name)
		require.NoError(t, err)
		steps = append(steps, strings.ReplaceAll(string(up), "/* TEMPLATE: schema */", pgx.Identifier{schema}.Sanitize()+"."))
	}
	return steps
}

// schemaObjects is what a migration leaves in a schema, with the schema's
// name replaced by "SCHEMA" so that two schemas compare.
type schemaObjects struct {
	columns   []string // table.column type, nullability, default, identity
	functions []string // name: pg_get_functiondef
	indexes   []string // name: indexdef
	triggers  []string // table.name enabled: pg_get_triggerdef
}

func fencingSchemaObjects(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) schemaObjects {
	t.Helper()
	query := func(sql string) []string {
		t.Helper()
		rows, err := pool.Query(ctx, sql, schema)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for i, s := range out {
			out[i] = strings.ReplaceAll(s, schema, "SCHEMA")
		}
		return out
	}
	return schemaObjects{
		columns: query(`SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' ||
    coalesce(column_default, '-') || ' ' || is_identity || ' ' || coalesce(identity_generation, '-')
FROM information_schema.columns WHERE table_schema = $1 ORDER BY table_name, ordinal_position`),
		functions: query(`SELECT p.proname || ': ' || pg_get_functiondef(p.oid)
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY 1`),
		indexes: query(`SELECT indexname || ': ' || indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY 1`),
		triggers: query(`SELECT c.relname || '.' || tg.tgname || ' ' || tg.tgenabled::text || ': ' || pg_get_triggerdef(tg.oid)
FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND NOT tg.tgisinternal ORDER BY 1`),
	}
}

// requireLeaseWorks checks the lease behaviour on schema: a fenced fetch
// gets a token and an expiry, and the attempt's completion (proved by the
// Pilot's record of its fetch, as River's completer writes it) applies,
// revokes the token and logs the attempt once.
func requireLeaseWorks(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO `+pgx.Identifier{schema, "river_job"}.Sanitize()+
		` (args, kind, max_attempts, queue, state) VALUES ('{}', 'lease_works', 5, 'default', 'available') RETURNING id`).Scan(&id))
	sink := newEventSink()
	driver := newDriver(t, pool, sink, nil)
	fenced, err := driver.Fenced(ctx, schema)
	require.NoError(t, err)
	require.True(t, fenced)
	pilot := driver.PluginPilot()
	fetched, err := pilot.JobGetAvailable(ctx, driver.GetExecutor(), nil, &riverdriver.JobGetAvailableParams{
		ClientID: "lease-works", MaxAttemptedBy: 100, MaxToLock: 1, Queue: "default", Schema: schema,
	})
	require.NoError(t, err)
	require.Len(t, fetched.Jobs, 1)
	require.Equal(t, id, fetched.Jobs[0].ID)
	running := getJob(ctx, t, pool, schema, id)
	require.Equal(t, "running", running.State)
	require.True(t, running.LeaseToken.Valid, "the fetch gets a token")
	require.True(t, running.LeaseExpiresAt.Valid, "the fetch gets a lease expiry")
	require.True(t, running.LeaseExpiresAt.Time.After(time.Now().Add(-time.Minute)))

	now := time.Now()
	rows, err := pilot.JobSetStateIfRunningMany(ctx, driver.GetExecutor(), &riverdriver.JobSetStateIfRunningManyParams{
		ID: []int64{id}, Attempt: []*int{nil}, ErrData: [][]byte{nil}, FinalizedAt: []*time.Time{&now},
		MetadataDoMerge: []bool{false}, MetadataUpdates: [][]byte{nil}, ScheduledAt: []*time.Time{nil},
		Schema: schema, State: []rivertype.JobState{rivertype.JobStateCompleted},
	})
	require.NoError(t, err)
	require.Len(t, rows, 1, "the attempt's completion applies")
	require.Zero(t, sink.count(fencing.EventStaleWriteRejected, 0))
	done := getJob(ctx, t, pool, schema, id)
	require.Equal(t, "completed", done.State)
	require.False(t, done.LeaseToken.Valid)
	require.False(t, done.LeaseExpiresAt.Valid)
	require.Equal(t, running.LeaseToken, done.LeaseLastToken)
	require.Equal(t, []string{"completed"}, attemptLog(ctx, t, pool, schema, id), "the attempt is logged once")
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
