package migrations_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestMigrator(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		migrator *migrations.Migrator
		pool     *pgxpool.Pool
		schema   string
	}

	setup := func(ctx context.Context, t *testing.T) *testBundle {
		t.Helper()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.EmptySchema(ctx, t)
		migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
		require.NoError(t, err)
		return &testBundle{migrator: migrator, pool: pool, schema: schema}
	}

	latest := func(t *testing.T, m *migrations.Migrator, line string) int {
		t.Helper()
		statuses, err := m.Status(t.Context())
		require.NoError(t, err)
		for _, s := range statuses {
			if s.Line == line {
				return s.Latest
			}
		}
		t.Fatalf("no line %s", line)
		return 0
	}

	// beforeFencing returns a schema with River's main line and the
	// fencing line one version short of version.
	beforeFencing := func(ctx context.Context, t *testing.T, version int) *testBundle {
		t.Helper()
		bundle := setup(ctx, t)
		_, err := bundle.migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineMain})
		require.NoError(t, err)
		if version > 1 {
			_, err = bundle.migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineFencing, TargetVersion: version - 1})
			require.NoError(t, err)
		}
		return bundle
	}

	// eachFencingStep runs test, in parallel, for each version of the
	// fencing line, on a schema one step short of it, with its river_job.
	eachFencingStep := func(t *testing.T, test func(t *testing.T, bundle *testBundle, version int, table string)) {
		t.Helper()
		versions := latest(t, setup(t.Context(), t).migrator, migrations.LineFencing)
		for version := 1; version <= versions; version++ {
			t.Run(fmt.Sprintf("fencing%03d", version), func(t *testing.T) {
				t.Parallel()
				bundle := beforeFencing(t.Context(), t, version)
				test(t, bundle, version, pgx.Identifier{bundle.schema, "river_job"}.Sanitize())
			})
		}
	}

	t.Run("ConcurrentUpAppliesOnce", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := setup(ctx, t)

		// Many migrators on one empty schema at the same moment, each with its
		// own pool as separate processes would have.
		const migratorCount = 6
		results := make([]*migrations.MigrateResult, migratorCount)
		errs := make([]error, migratorCount)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range migratorCount {
			pool, err := pgxpool.New(ctx, dbtest.URL(ctx, t))
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			m, err := migrations.New(pool, &migrations.Config{Schema: bundle.schema})
			require.NoError(t, err)
			wg.Go(func() {
				<-start
				results[i], errs[i] = m.Up(ctx, nil)
			})
		}
		close(start)
		wg.Wait()

		applied := 0
		for i := range migratorCount {
			require.NoError(t, errs[i], "migrator %d", i)
			applied += len(results[i].Versions)
		}
		total := 0
		for _, line := range migrations.Lines() {
			total += latest(t, bundle.migrator, line)
		}
		require.Equal(t, total, applied, "every version applied exactly once across all migrators")
		require.NoError(t, bundle.migrator.Verify(ctx))
	})

	t.Run("DownEverythingThenUpRoundTrips", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := setup(ctx, t)

		_, err := bundle.migrator.Up(ctx, nil)
		require.NoError(t, err)
		before := tableNames(ctx, t, bundle.pool, bundle.schema)
		require.Contains(t, before, "river_job")
		require.Contains(t, before, "weir_namespace")

		res, err := bundle.migrator.Down(ctx, &migrations.DownOpts{TargetVersion: -1})
		require.NoError(t, err)
		require.Equal(t, migrations.LineWeir, res.Versions[0].Line, "dependents go first")
		require.Equal(t, migrations.LineMain, res.Versions[len(res.Versions)-1].Line)
		require.Empty(t, tableNames(ctx, t, bundle.pool, bundle.schema))

		statuses, err := bundle.migrator.Status(ctx)
		require.NoError(t, err)
		for _, s := range statuses {
			require.Zero(t, s.Current, s.Line)
			require.True(t, s.Behind(), s.Line)
		}

		_, err = bundle.migrator.Up(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, before, tableNames(ctx, t, bundle.pool, bundle.schema))
		require.NoError(t, bundle.migrator.Verify(ctx))
	})

	t.Run("DownMainWithDependentsIsRefused", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := setup(ctx, t)

		_, err := bundle.migrator.Up(ctx, nil)
		require.NoError(t, err)

		_, err = bundle.migrator.Down(ctx, &migrations.DownOpts{Line: migrations.LineMain})
		require.ErrorIs(t, err, migrations.ErrLineDependency)
		var depErr *migrations.LineDependencyError
		require.ErrorAs(t, err, &depErr)
		require.Equal(t, migrations.LineMain, depErr.Line)
		require.NoError(t, bundle.migrator.Verify(ctx), "nothing changed")
	})

	t.Run("DownNeedsOpts", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := setup(ctx, t)

		_, err := bundle.migrator.Down(ctx, nil)
		require.Error(t, err)
		_, err = bundle.migrator.Down(ctx, &migrations.DownOpts{})
		require.Error(t, err, "every line without TargetVersion -1")
	})

	t.Run("DownOneLineOneStep", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := setup(ctx, t)

		_, err := bundle.migrator.Up(ctx, nil)
		require.NoError(t, err)
		triggers := func() int {
			var n int
			require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND NOT tgisinternal",
				pgx.Identifier{bundle.schema, "river_job"}.Sanitize()).Scan(&n))
			return n
		}
		require.Equal(t, 4, triggers())

		// Force: the weir line stays installed (TestDownFencingGuards).
		// Fencing 003's step takes out its trigger and restores 001's
		// function.
		res, err := bundle.migrator.Down(ctx, &migrations.DownOpts{Line: migrations.LineFencing, Force: true})
		require.NoError(t, err)
		require.Len(t, res.Versions, 1)
		require.Equal(t, 3, res.Versions[0].Version)
		require.False(t, functionExists(ctx, t, bundle.pool, bundle.schema, "weir_fencing_log_final_attempt"))
		require.NotContains(t, functionDef(ctx, t, bundle.pool, bundle.schema, "weir_fencing_job_transition"), "NOT IN")
		require.Equal(t, 3, triggers())

		// Fencing 002's step takes out its delete trigger only.
		res, err = bundle.migrator.Down(ctx, &migrations.DownOpts{Line: migrations.LineFencing, Force: true})
		require.NoError(t, err)
		require.Len(t, res.Versions, 1)
		require.Equal(t, 2, res.Versions[0].Version)
		require.False(t, functionExists(ctx, t, bundle.pool, bundle.schema, "weir_fencing_forget_attempts"))
		require.Equal(t, 2, triggers())
		require.Contains(t, tableNames(ctx, t, bundle.pool, bundle.schema), "weir_job_attempt")

		// Fencing 001's step takes out everything else it installed.
		res, err = bundle.migrator.Down(ctx, &migrations.DownOpts{Line: migrations.LineFencing, Force: true})
		require.NoError(t, err)
		require.Len(t, res.Versions, 1)
		require.Equal(t, 1, res.Versions[0].Version)
		columns := columnNames(ctx, t, bundle.pool, bundle.schema, "river_job")
		for _, column := range []string{"lease_token", "lease_expires_at", "lease_last_token", "lease_details"} {
			require.NotContains(t, columns, column)
		}
		require.NotContains(t, tableNames(ctx, t, bundle.pool, bundle.schema), "weir_job_attempt")
		require.False(t, functionExists(ctx, t, bundle.pool, bundle.schema, "weir_fencing_job_transition"))
		require.Zero(t, triggers())

		err = bundle.migrator.Verify(ctx)
		require.ErrorIs(t, err, migrations.ErrSchemaBehind)
		var behind *migrations.SchemaBehindError
		require.ErrorAs(t, err, &behind)
		require.Len(t, behind.Lines, 1)
		require.Equal(t, migrations.LineFencing, behind.Lines[0].Line)
		require.Equal(t, bundle.schema, behind.Schema)

		// Up again: all of it comes back.
		res, err = bundle.migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineFencing})
		require.NoError(t, err)
		require.Len(t, res.Versions, 3)
		require.Contains(t, columnNames(ctx, t, bundle.pool, bundle.schema, "river_job"), "lease_token")
		require.Contains(t, functionDef(ctx, t, bundle.pool, bundle.schema, "weir_fencing_job_transition"), "live lease")
		require.Contains(t, triggerDef(ctx, t, bundle.pool, bundle.schema, "weir_fencing_job_lease_insert"), "new.lease_token IS NULL")
		require.Contains(t, triggerDef(ctx, t, bundle.pool, bundle.schema, "weir_fencing_job_lease_update"), "weir_fencing_job_transition")
		require.Contains(t, triggerDef(ctx, t, bundle.pool, bundle.schema, "weir_fencing_job_delete"), "weir_fencing_forget_attempts")
		require.Contains(t, triggerDef(ctx, t, bundle.pool, bundle.schema, "weir_fencing_job_unfinalize"), "weir_fencing_log_final_attempt")
		require.NoError(t, bundle.migrator.Verify(ctx))
	})

	// Fencing 003 keeps the attempt that finalizes a job on the job's row,
	// logs it when the job leaves its final state unless the log has it
	// (as for a job finished before 003), and its down step logs the final
	// attempts kept on rows.
	t.Run("Fencing003KeepsTheFinalAttemptOnItsJob", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := beforeFencing(ctx, t, 3)
		jobs := pgx.Identifier{bundle.schema, "river_job"}.Sanitize()
		attempts := pgx.Identifier{bundle.schema, "weir_job_attempt"}.Sanitize()
		run := func(id int64, sqls ...string) {
			t.Helper()
			for _, sql := range sqls {
				_, err := bundle.pool.Exec(ctx, "UPDATE "+jobs+" SET "+sql+" WHERE id = $1", id)
				require.NoError(t, err)
			}
		}
		job := func() int64 {
			var id int64
			require.NoError(t, bundle.pool.QueryRow(ctx, "INSERT INTO "+jobs+" (args, kind, max_attempts) VALUES ('{}', 'k', 5) RETURNING id").Scan(&id))
			run(id, "state = 'running', attempt = 1, attempted_at = now(), attempted_by = '{w}'")
			return id
		}
		type logged struct {
			Attempt int
			Outcome string
			Proven  bool // its token and start are the attempt's
		}
		logOf := func(id int64) []logged {
			t.Helper()
			rows, err := bundle.pool.Query(ctx, "SELECT a.attempt, a.outcome, a.lease_token IS NOT NULL"+
				" AND a.started_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM "+attempts+" b"+
				" WHERE b.job_id = a.job_id AND b.id <> a.id AND (b.lease_token = a.lease_token OR b.started_at = a.started_at))"+
				" FROM "+attempts+" a WHERE a.job_id = $1 ORDER BY a.id", id)
			require.NoError(t, err)
			log, err := pgx.CollectRows(rows, pgx.RowToStructByPos[logged])
			require.NoError(t, err)
			return log
		}
		finish := "state = 'completed', finalized_at = now()"

		before := job()
		run(before, finish)
		require.Equal(t, []logged{{Attempt: 1, Outcome: "completed", Proven: true}}, logOf(before), "before 003 the final attempt is logged")

		_, err := bundle.migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineFencing, TargetVersion: 3})
		require.NoError(t, err)
		after := job()
		run(after, finish)
		require.Empty(t, logOf(after), "from 003 the final attempt stays on its row")

		// Retried: the final attempt is logged once, whenever it ended.
		run(before, "state = 'available', finalized_at = NULL")
		require.Equal(t, []logged{{Attempt: 1, Outcome: "completed", Proven: true}}, logOf(before))
		run(after, "state = 'available', finalized_at = NULL", "state = 'running', attempt = 2, attempted_at = now()", "state = 'discarded', finalized_at = now()")
		require.Equal(t, []logged{{Attempt: 1, Outcome: "completed", Proven: true}}, logOf(after))

		// Cancelled while not running: its last attempt was logged when it
		// ended, and is not logged again.
		cancelled := job()
		run(cancelled, "state = 'retryable'", "state = 'cancelled', finalized_at = now()", "state = 'available', finalized_at = NULL")
		require.Equal(t, []logged{{Attempt: 1, Outcome: "retryable", Proven: true}}, logOf(cancelled))

		// Down: the final attempts kept on rows are logged.
		_, err = bundle.migrator.Down(ctx, &migrations.DownOpts{Line: migrations.LineFencing, TargetVersion: 2, Force: true})
		require.NoError(t, err)
		require.Equal(t, []logged{{Attempt: 1, Outcome: "completed", Proven: true}, {Attempt: 2, Outcome: "discarded", Proven: true}}, logOf(after))
		var asOnRow bool
		require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT a.lease_token = j.lease_last_token AND a.started_at = j.attempted_at"+
			" AND a.finished_at = j.finalized_at AND a.attempted_by = 'w' FROM "+attempts+" a JOIN "+jobs+" j ON j.id = a.job_id"+
			" WHERE a.job_id = $1 AND a.attempt = 2", after).Scan(&asOnRow))
		require.True(t, asOnRow, "logged as the job's row kept it")
		require.Equal(t, []logged{{Attempt: 1, Outcome: "completed", Proven: true}}, logOf(before))
		require.Equal(t, []logged{{Attempt: 1, Outcome: "retryable", Proven: true}}, logOf(cancelled))
	})

	// Fencing 002 deletes the attempts that jobs deleted before it left
	// behind, and no others.
	t.Run("Fencing002ForgetsTheAttemptsOfDeletedJobs", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := beforeFencing(ctx, t, 2)
		jobs := pgx.Identifier{bundle.schema, "river_job"}.Sanitize()
		attempts := pgx.Identifier{bundle.schema, "weir_job_attempt"}.Sanitize()

		var kept, deleted int64
		for _, id := range []*int64{&kept, &deleted} {
			require.NoError(t, bundle.pool.QueryRow(ctx, "INSERT INTO "+jobs+" (args, kind, max_attempts) VALUES ('{}', 'k', 5) RETURNING id").Scan(id))
			_, err := bundle.pool.Exec(ctx, "INSERT INTO "+attempts+" (job_id, attempt, outcome) VALUES ($1, 1, 'retryable'), ($1, 2, 'completed')", *id)
			require.NoError(t, err)
		}
		_, err := bundle.pool.Exec(ctx, "DELETE FROM "+jobs+" WHERE id = $1", deleted)
		require.NoError(t, err)
		logged := func(id int64) int {
			var n int
			require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM "+attempts+" WHERE job_id = $1", id).Scan(&n))
			return n
		}
		require.Equal(t, 2, logged(deleted), "before 002 a deleted job leaves its attempts behind")

		_, err = bundle.migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineFencing, TargetVersion: 2})
		require.NoError(t, err)
		require.Zero(t, logged(deleted))
		require.Equal(t, 2, logged(kept))
	})

	t.Run("NonMainLineNeedsMainFirst", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := setup(ctx, t)

		_, err := bundle.migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineWeir})
		require.ErrorIs(t, err, migrations.ErrLineDependency)
		require.Empty(t, tableNames(ctx, t, bundle.pool, bundle.schema))
	})

	t.Run("SchemaNameRiverCannotUse", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)

		longest := strings.Repeat("s", migrations.SchemaNameMax)
		_, err := migrations.New(pool, &migrations.Config{Schema: longest})
		require.NoError(t, err)
		_, err = river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: longest})
		require.NoError(t, err, "River takes the longest name New takes")

		tooLong := longest + "s"
		_, err = river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: tooLong})
		require.Error(t, err, "River refuses a longer one")
		_, err = migrations.New(pool, &migrations.Config{Schema: tooLong})
		var nameErr *migrations.SchemaNameError
		require.ErrorAs(t, err, &nameErr)
		require.ErrorIs(t, err, migrations.ErrSchemaName)
		require.Equal(t, tooLong, nameErr.Schema)
	})

	t.Run("SchemaIsolation", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := setup(ctx, t)
		other := setup(ctx, t)

		_, err := bundle.migrator.Up(ctx, nil)
		require.NoError(t, err)

		require.Empty(t, tableNames(ctx, t, other.pool, other.schema))
		err = other.migrator.Verify(ctx)
		require.ErrorIs(t, err, migrations.ErrSchemaBehind)
		var behind *migrations.SchemaBehindError
		require.ErrorAs(t, err, &behind)
		require.Len(t, behind.Lines, len(migrations.Lines()))
	})

	t.Run("SearchPathSchema", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		schema := dbtest.EmptySchema(ctx, t)

		// No Config.Schema: tables land in the first schema of search_path.
		config, err := pgxpool.ParseConfig(dbtest.URL(ctx, t))
		require.NoError(t, err)
		config.ConnConfig.RuntimeParams["search_path"] = schema
		pool, err := pgxpool.NewWithConfig(ctx, config)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		_, err = pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
		require.NoError(t, err)

		m, err := migrations.New(pool, nil)
		require.NoError(t, err)
		_, err = m.Up(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, m.Verify(ctx))
		require.Contains(t, tableNames(ctx, t, dbtest.Pool(ctx, t), schema), "weir_namespace")
	})

	t.Run("StatusOnEmptySchema", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := setup(ctx, t)

		statuses, err := bundle.migrator.Status(ctx)
		require.NoError(t, err)
		require.Len(t, statuses, len(migrations.Lines()))
		for i, s := range statuses {
			require.Equal(t, migrations.Lines()[i], s.Line)
			require.Zero(t, s.Current)
			require.Positive(t, s.Latest)
			require.Len(t, s.Pending, s.Latest)
			require.Empty(t, s.Unknown)
		}
	})

	t.Run("UnknownLine", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := setup(ctx, t)

		_, err := bundle.migrator.Up(ctx, &migrations.UpOpts{Line: "fence"})
		require.ErrorIs(t, err, migrations.ErrUnknownLine)
		_, err = bundle.migrator.Down(ctx, &migrations.DownOpts{Line: "nope"})
		require.ErrorIs(t, err, migrations.ErrUnknownLine)
	})

	t.Run("UnknownVersionFromNewerBuild", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := setup(ctx, t)

		_, err := bundle.migrator.Up(ctx, nil)
		require.NoError(t, err)
		next := latest(t, bundle.migrator, migrations.LineWeir) + 1
		_, err = bundle.pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{bundle.schema, "river_migration"}.Sanitize()+
			" (line, version) VALUES ('weir', $1)", next)
		require.NoError(t, err)

		statuses, err := bundle.migrator.Status(ctx)
		require.NoError(t, err)
		require.Equal(t, []int{next}, statuses[2].Unknown)
		require.NoError(t, bundle.migrator.Verify(ctx), "a database ahead of the build is not behind")
	})

	t.Run("UpTwiceChangesNothing", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := setup(ctx, t)

		res, err := bundle.migrator.Up(ctx, nil)
		require.NoError(t, err)
		require.NotEmpty(t, res.Versions)
		before := tableNames(ctx, t, bundle.pool, bundle.schema)

		res, err = bundle.migrator.Up(ctx, nil)
		require.NoError(t, err)
		require.Empty(t, res.Versions)
		require.Equal(t, before, tableNames(ctx, t, bundle.pool, bundle.schema))
	})

	t.Run("UpWithTarget", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := setup(ctx, t)

		res, err := bundle.migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineMain, TargetVersion: 4})
		require.NoError(t, err)
		require.Len(t, res.Versions, 4)

		statuses, err := bundle.migrator.Status(ctx)
		require.NoError(t, err)
		require.Equal(t, 4, statuses[0].Current, "read before River's line column exists")

		_, err = bundle.migrator.Up(ctx, &migrations.UpOpts{MaxSteps: 1})
		require.Error(t, err, "MaxSteps needs a Line")
	})

	// Each fencing step runs while a worker's transaction has read river_job
	// and then writes it: the step waits for that transaction, or does not
	// need to, and neither deadlocks. (A weaker lock on river_job taken
	// before a stronger one that conflicts with the worker's read, as 001's
	// ACCESS EXCLUSIVE does, would make the two wait for each other.)
	t.Run("FencingWaitsForAnOpenTransaction", func(t *testing.T) {
		t.Parallel()
		eachFencingStep(t, func(t *testing.T, bundle *testBundle, version int, table string) {
			ctx := t.Context()
			worker, err := bundle.pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = worker.Rollback(context.WithoutCancel(ctx)) }()
			_, err = worker.Exec(ctx, "SELECT count(*) FROM "+table)
			require.NoError(t, err)

			migrated := make(chan error, 1)
			go func() {
				_, err := bundle.migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineFencing, TargetVersion: version})
				migrated <- err
			}()
			// Until the step waits for a lock on river_job, or is done.
			var done error
			finished := false
			require.Eventually(t, func() bool {
				select {
				case done = <-migrated:
					finished = true
					return true
				default:
				}
				var waiting bool
				err := bundle.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = $1::regclass AND NOT granted)", table).Scan(&waiting)
				require.NoError(t, err)
				return waiting
			}, 10*time.Second, 10*time.Millisecond)

			_, err = worker.Exec(ctx, "UPDATE "+table+" SET priority = priority WHERE id = -1")
			require.NoError(t, err, "the worker's write does not deadlock with the migration")
			require.NoError(t, worker.Commit(ctx))
			if !finished {
				done = <-migrated
			}
			require.NoError(t, done)
			statuses, err := bundle.migrator.Status(ctx)
			require.NoError(t, err)
			require.Equal(t, version, statuses[1].Current)
		})
	})

	// The fencing line runs on a large, live river_job: it builds no index
	// there (an index on lease_expires_at would make every heartbeat a
	// non-HOT update), after any of its versions.
	t.Run("FencingBuildsNoIndexOnRiverJob", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := beforeFencing(ctx, t, 1)
		before := indexDefs(ctx, t, bundle.pool, bundle.schema, "river_job")
		require.NotEmpty(t, before)

		for version := 1; version <= latest(t, bundle.migrator, migrations.LineFencing); version++ {
			_, err := bundle.migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineFencing, TargetVersion: version})
			require.NoError(t, err)
			require.Equal(t, before, indexDefs(ctx, t, bundle.pool, bundle.schema, "river_job"), "fencing %03d indexed river_job", version)
			// The definitions are filtered here, not in SQL: a condition on
			// indexdef may run pg_get_indexdef on an index of another
			// schema, which a parallel test can drop meanwhile ("could not
			// open relation with OID", seen once in .ci/run).
			rows, err := bundle.pool.Query(ctx, "SELECT indexdef FROM pg_indexes WHERE schemaname = $1", bundle.schema)
			require.NoError(t, err)
			defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			require.NotEmpty(t, defs)
			for _, def := range defs {
				require.NotContains(t, def, "lease_expires_at", "fencing %03d: an index on lease_expires_at", version)
			}
		}
		require.Contains(t, columnNames(ctx, t, bundle.pool, bundle.schema, "river_job"), "lease_expires_at")
	})

	// Every fencing up step runs under a lock_timeout: while a long
	// transaction holds the lock a worker's write takes on river_job, the
	// step gives up with lock_not_available (and changes nothing) instead of
	// queueing behind it, and every worker's statement behind the step,
	// forever. (FencingWaitsForAnOpenTransaction covers a transaction that
	// ends in time.)
	t.Run("FencingStepsGiveUpOnALockedRiverJob", func(t *testing.T) {
		t.Parallel()
		eachFencingStep(t, func(t *testing.T, bundle *testBundle, version int, table string) {
			ctx := t.Context()
			holder, err := bundle.pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = holder.Rollback(context.WithoutCancel(ctx)) }()
			_, err = holder.Exec(ctx, "LOCK TABLE "+table+" IN ROW EXCLUSIVE MODE")
			require.NoError(t, err)

			// Far longer than any lock_timeout the steps set: a step
			// without one waits until this deadline and fails otherwise.
			upCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			_, err = bundle.migrator.Up(upCtx, &migrations.UpOpts{Line: migrations.LineFencing, TargetVersion: version})
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr, "the step gives up with a Postgres error: %v", err)
			require.Equal(t, pgerrcode.LockNotAvailable, pgErr.Code, "lock_timeout, not a wait until the deadline: %v", err)
			require.NoError(t, upCtx.Err())

			statuses, err := bundle.migrator.Status(ctx)
			require.NoError(t, err)
			require.Equal(t, migrations.LineFencing, statuses[1].Line)
			require.Equal(t, version-1, statuses[1].Current, "the step changed nothing")

			// Once the table is quieter, the step is simply rerun.
			require.NoError(t, holder.Rollback(ctx))
			res, err := bundle.migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineFencing, TargetVersion: version})
			require.NoError(t, err)
			require.Len(t, res.Versions, 1)
		})
	})
}

func tableNames(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY tablename", schema)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

func functionExists(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema, name string) bool {
	t.Helper()
	var exists bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regprocedure($1) IS NOT NULL",
		pgx.Identifier{schema, name}.Sanitize()+"()").Scan(&exists))
	return exists
}

// functionDef returns the definition of schema's function name(), which
// must exist.
func functionDef(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema, name string) string {
	t.Helper()
	var def string
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_get_functiondef(to_regprocedure($1))",
		pgx.Identifier{schema, name}.Sanitize()+"()").Scan(&def))
	return def
}

// triggerDef returns the definition of the trigger name on schema's
// river_job.
func triggerDef(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema, name string) string {
	t.Helper()
	var def string
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = $1 AND tgrelid = to_regclass($2)",
		name, pgx.Identifier{schema, "river_job"}.Sanitize()).Scan(&def))
	return def
}

func columnNames(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema, table string) []string {
	t.Helper()
	rows, err := pool.Query(ctx,
		"SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY column_name",
		schema, table)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

func indexDefs(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema, table string) []string {
	t.Helper()
	rows, err := pool.Query(ctx, "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = $2 ORDER BY indexname", schema, table)
	require.NoError(t, err)
	defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return defs
}
