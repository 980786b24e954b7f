package dbtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestDBTest(t *testing.T) {
	t.Parallel()

	t.Run("EmptySearchPathRejectsUnqualifiedNames", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)

		_, err := pool.Exec(ctx, "SELECT count(*) FROM river_job")
		require.Error(t, err, "an unqualified table name must not resolve")
		_, err = pool.Exec(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "river_job"}.Sanitize())
		require.NoError(t, err)
	})

	t.Run("TestDatabaseIsEmptyAndSeparate", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		url := dbtest.TestDatabase(ctx, t)

		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer conn.Close(context.WithoutCancel(ctx))
		var name string
		var tables int
		require.NoError(t, conn.QueryRow(ctx,
			"SELECT current_database(), (SELECT count(*) FROM pg_tables WHERE schemaname = 'public')").Scan(&name, &tables))
		require.Contains(t, name, "_db_")
		require.Zero(t, tables)
	})

	t.Run("TestSchemaIsMigratedAndIsolated", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		a, b := dbtest.TestSchema(ctx, t), dbtest.TestSchema(ctx, t)
		require.NotEqual(t, a, b)

		for _, schema := range []string{a, b} {
			m, err := migrations.New(pool, &migrations.Config{Schema: schema})
			require.NoError(t, err)
			require.NoError(t, m.Verify(ctx))
		}
		_, err := pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{a, "river_job"}.Sanitize()+" (args, kind, max_attempts) VALUES ('{}', 'k', 1)")
		require.NoError(t, err)
		require.Equal(t, 1, countJobs(ctx, t, a))
		require.Zero(t, countJobs(ctx, t, b))
	})

	t.Run("TestSchemaIsEmptiedOnReuse", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)

		// A subtest's schema goes back to the pool when it ends; the next
		// TestSchema (same process, nothing else running here) may get it back.
		var first string
		t.Run("Dirty", func(t *testing.T) {
			first = dbtest.TestSchema(ctx, t)
			_, err := pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{first, "river_job"}.Sanitize()+" (args, kind, max_attempts) VALUES ('{}', 'k', 1)")
			require.NoError(t, err)
			_, err = pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{first, "weir_namespace"}.Sanitize()+" (name) VALUES ('ns')")
			require.NoError(t, err)
		})
		for range 50 { // take schemas until the dirty one comes back
			schema := dbtest.TestSchema(ctx, t)
			if schema != first {
				continue
			}
			require.Zero(t, countJobs(ctx, t, schema))
			var namespaces int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "weir_namespace"}.Sanitize()).Scan(&namespaces))
			require.Zero(t, namespaces)

			var nextID int64
			require.NoError(t, pool.QueryRow(ctx, "INSERT INTO "+pgx.Identifier{schema, "river_job"}.Sanitize()+
				" (args, kind, max_attempts) VALUES ('{}', 'k', 1) RETURNING id").Scan(&nextID))
			require.Equal(t, int64(1), nextID, "identities restart")
			return
		}
		t.Fatal("the dirty schema never came back from the pool")
	})

	t.Run("TestTxRollsBack", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		var schema string
		require.NoError(t, dbtest.TestTx(ctx, t).QueryRow(ctx, "SELECT current_schema()").Scan(&schema))

		var id int64
		t.Run("Insert", func(t *testing.T) {
			tx := dbtest.TestTx(ctx, t)
			require.NoError(t, tx.QueryRow(ctx, "INSERT INTO river_job (args, kind, max_attempts) VALUES ('{}', 'rolled_back', 1) RETURNING id").Scan(&id))
		})
		var n int
		require.NoError(t, dbtest.Pool(ctx, t).QueryRow(ctx,
			"SELECT count(*) FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+" WHERE id = $1", id).Scan(&n))
		require.Zero(t, n)
	})
}

func countJobs(ctx context.Context, t *testing.T, schema string) int {
	t.Helper()
	var n int
	require.NoError(t, dbtest.Pool(ctx, t).QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()).Scan(&n))
	return n
}
