// Package dbtest gives tests real Postgres: an isolated, migrated schema per
// test (TestSchema), a rolled-back transaction on a shared migrated schema
// (TestTx), a fresh empty database or schema for migration tests, and a private
// Postgres server that a test may stop, crash and restart (Server).
//
// The database comes from TEST_DATABASE_URL (make test sets it to a private
// cluster it starts for the run). When it is unset, the first test that needs
// a database starts a private cluster for this test binary from the locally
// installed Postgres binaries, so `go test ./somepkg` works without set-up.
//
// Every test package calls Main from TestMain: it closes shared pools and
// clusters after the tests and then fails the run on leaked goroutines.
//
// The shared pool sets an empty search_path so that any query that forgets to
// qualify a table with its schema fails in tests instead of finding the wrong
// table in production.
package dbtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/weirhq/weir/internal/pgcluster"
	"github.com/weirhq/weir/migrations"
)

// EnvDatabaseURL names the variable that points tests at a Postgres server.
// The role needs to create schemas and databases.
const EnvDatabaseURL = "TEST_DATABASE_URL"

// MaxConnsDefault is the shared pool's size: enough for many parallel tests
// each running a River client.
const MaxConnsDefault = 40

var shared struct {
	mu       sync.Mutex
	cluster  *pgcluster.Cluster // started when EnvDatabaseURL is unset
	pool     *pgxpool.Pool
	url      string
	schemas  []string // free, migrated schemas ready for reuse
	created  int      // schemas made so far by this process
	txSchema string   // migrated once for TestTx
}

// Main runs the package's tests, then closes shared pools and clusters and
// fails the run if goroutines leaked. Call it from TestMain:
//
//	func TestMain(m *testing.M) { dbtest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	if shared.pool != nil {
		shared.pool.Close()
	}
	if shared.cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := shared.cluster.Close(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "dbtest: stopping private cluster: %v\n", err)
		}
		cancel()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines leaked after tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// URL returns the server URL tests use: TEST_DATABASE_URL, or a private
// cluster started for this test binary.
func URL(ctx context.Context, tb testing.TB) string {
	tb.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	return urlLocked(ctx, tb)
}

func urlLocked(ctx context.Context, tb testing.TB) string {
	tb.Helper()
	url, err := sharedURLLocked(ctx)
	if errors.Is(err, pgcluster.ErrBinariesNotFound) {
		tb.Fatalf("dbtest: %v\nRun the tests with `make test` (it installs Postgres where it can), or set %s.", err, EnvDatabaseURL)
	}
	require.NoError(tb, err)
	return url
}

// ExampleURL is URL for runnable examples, which have no testing.TB. It
// panics when no server can be had.
func ExampleURL() string {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	url, err := sharedURLLocked(context.Background())
	if err != nil {
		panic(err)
	}
	return url
}

func sharedURLLocked(ctx context.Context) (string, error) {
	if shared.url != "" {
		return shared.url, nil
	}
	if url := os.Getenv(EnvDatabaseURL); url != "" {
		shared.url = url
		return url, nil
	}

	cluster, err := pgcluster.StartTemp(context.WithoutCancel(ctx), "weir-dbtest-", nil)
	if err != nil {
		return "", fmt.Errorf("%s is not set and no private Postgres could be started: %w", EnvDatabaseURL, err)
	}
	shared.cluster = cluster
	shared.url = cluster.URL("postgres")
	return shared.url, nil
}

// TracedPool returns a pool of its own on the test database whose
// connections report to tracer (a pgx.QueryTracer, and a pgx.BatchTracer if
// it is one), closed when the test ends.
func TracedPool(ctx context.Context, tb testing.TB, tracer pgx.QueryTracer) *pgxpool.Pool {
	tb.Helper()
	config, err := pgxpool.ParseConfig(URL(ctx, tb))
	require.NoError(tb, err)
	config.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, config)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	return pool
}

// Pool returns the process-wide pool on the test server. Its search_path is
// empty: queries must name their schema.
func Pool(ctx context.Context, tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.pool != nil {
		return shared.pool
	}
	config, err := pgxpool.ParseConfig(urlLocked(ctx, tb))
	require.NoError(tb, err)
	config.MaxConns = MaxConnsDefault
	config.ConnConfig.RuntimeParams["search_path"] = ""
	pool, err := pgxpool.NewWithConfig(context.WithoutCancel(ctx), config)
	require.NoError(tb, err)
	shared.pool = pool
	return pool
}

// TestSchema returns a schema at the latest version of every migration line,
// for this test alone. At the end of the test it goes back to a per-process
// pool and is emptied before its next use, so only the first few tests pay for
// migrations. Use it when a test needs commits, several connections,
// LISTEN/NOTIFY or a live River client; pass the name to river.Config.Schema
// and qualify tables with it.
func TestSchema(ctx context.Context, tb testing.TB) string {
	tb.Helper()
	pool := Pool(ctx, tb)

	shared.mu.Lock()
	var schema string
	if n := len(shared.schemas); n > 0 {
		schema = shared.schemas[n-1]
		shared.schemas = shared.schemas[:n-1]
	}
	shared.mu.Unlock()
	if schema == "" {
		schema = newName("")
	}

	// A schema this process migrated is only emptied; one of that name left by
	// an earlier process is dropped and migrated afresh, as the migrations may
	// have changed since.
	if _, ours := migratedHere.Load(schema); ours {
		truncateSchema(ctx, tb, pool, schema)
	} else {
		migrateSchema(ctx, tb, pool, schema)
	}

	tb.Cleanup(func() {
		shared.mu.Lock()
		defer shared.mu.Unlock()
		shared.schemas = append(shared.schemas, schema)
	})
	return schema
}

// EmptySchema returns the name of a schema that does not exist yet and is
// dropped (if it was created) when the test ends: for tests of the migrator.
func EmptySchema(ctx context.Context, tb testing.TB) string {
	tb.Helper()
	pool := Pool(ctx, tb)
	schema := newName("empty_")

	dropSchema(ctx, tb, pool, schema)
	tb.Cleanup(func() { dropSchema(context.WithoutCancel(ctx), tb, pool, schema) })
	return schema
}

// FreshSchema returns a schema at the latest version of every migration
// line, created for this test alone and dropped when it ends. Unlike
// TestSchema's, its tables have never held rows nor been analyzed: for tests
// of what the planner does with a young table's statistics.
func FreshSchema(ctx context.Context, tb testing.TB) string {
	tb.Helper()
	schema, _ := SchemaAt(ctx, tb, "", 0)
	return schema
}

// SchemaAt returns a schema of this test alone (dropped when it ends) with
// every migration line at its latest version except line, which stops at
// version (0: the latest too; -1: not installed), and the migrator that
// made it: for tests of a migration's rollout, which then take line up or
// down themselves.
func SchemaAt(ctx context.Context, tb testing.TB, line string, version int) (string, *migrations.Migrator) {
	tb.Helper()
	schema := EmptySchema(ctx, tb)
	migrator, err := migrations.New(Pool(ctx, tb), &migrations.Config{Schema: schema})
	require.NoError(tb, err)
	for _, l := range migrations.Lines() {
		opts := &migrations.UpOpts{Line: l}
		if l == line && version < 0 {
			continue
		}
		if l == line {
			opts.TargetVersion = version
		}
		_, err = migrator.Up(ctx, opts)
		require.NoError(tb, err)
	}
	return schema, migrator
}

// TestTx returns a transaction whose search_path is a migrated schema shared by
// the package's tests; it is rolled back when the test ends. Prefer it to
// TestSchema unless the test needs a commit.
func TestTx(ctx context.Context, tb testing.TB) pgx.Tx {
	tb.Helper()
	pool := Pool(ctx, tb)

	shared.mu.Lock()
	if shared.txSchema == "" {
		schema := schemaPrefix() + "_tx"
		dropSchema(ctx, tb, pool, schema)
		migrateSchema(ctx, tb, pool, schema)
		shared.txSchema = schema
	}
	schema := shared.txSchema
	shared.mu.Unlock()

	tx, err := pool.Begin(ctx)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		// ctx may be t.Context(), which is already cancelled during cleanup.
		err := tx.Rollback(context.WithoutCancel(ctx))
		if err != nil && !errors.Is(err, pgx.ErrTxClosed) {
			tb.Errorf("rolling back test tx: %v", err)
		}
	})
	_, err = tx.Exec(ctx, "SET LOCAL search_path TO "+pgx.Identifier{schema}.Sanitize())
	require.NoError(tb, err)
	return tx
}

// TestDatabase creates an empty database, dropped when the test ends, and
// returns its URL.
func TestDatabase(ctx context.Context, tb testing.TB) string {
	tb.Helper()
	pool := Pool(ctx, tb)
	name := newName("db_")

	ident := pgx.Identifier{name}.Sanitize()
	_, err := pool.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
	require.NoError(tb, err)
	_, err = pool.Exec(ctx, "CREATE DATABASE "+ident)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		_, err := pool.Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
		if err != nil {
			tb.Errorf("dropping test database %s: %v", name, err)
		}
	})

	connString, err := withDatabase(URL(ctx, tb), name)
	require.NoError(tb, err)
	return connString
}

// Server starts a private Postgres server for this test, which it may stop,
// crash, pause and restart; it is stopped and its files removed when the test
// ends. opts may be nil.
func Server(ctx context.Context, tb testing.TB, opts *pgcluster.Config) *pgcluster.Cluster {
	tb.Helper()
	cluster, err := pgcluster.StartTemp(ctx, "weir-pgserver-", opts)
	if errors.Is(err, pgcluster.ErrBinariesNotFound) {
		tb.Fatalf("dbtest.Server needs local Postgres binaries: %v", err)
	}
	require.NoError(tb, err)
	tb.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := cluster.Close(stopCtx); err != nil {
			tb.Errorf("stopping test server: %v", err)
		}
	})
	return cluster
}

func migrateSchema(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, schema string) {
	tb.Helper()
	dropSchema(ctx, tb, pool, schema)
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	require.NoError(tb, err)
	_, err = migrator.Up(ctx, nil)
	require.NoError(tb, err)
	migratedHere.Store(schema, struct{}{})
}

func truncateSchema(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, schema string) {
	tb.Helper()
	var tables []string
	for _, line := range migrations.Lines() {
		for _, table := range migrations.TruncateTables(line, 0) {
			tables = append(tables, pgx.Identifier{schema, table}.Sanitize())
		}
	}
	execPastDeadlocks(ctx, tb, pool, "TRUNCATE "+strings.Join(tables, ", ")+" RESTART IDENTITY CASCADE")
}

// execPastDeadlocks runs sql, which locks a schema's tables one after the
// other (TRUNCATE, DROP SCHEMA), and runs it again when it was a deadlock's
// victim. The previous test's connections are closed, but a backend may
// still be finishing a statement that one of them started, and take its
// locks in another order. The backend ends soon; try again.
func execPastDeadlocks(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, sql string) {
	tb.Helper()
	var err error
	for attempt := range 5 {
		_, err = pool.Exec(ctx, sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
	}
	require.NoError(tb, err)
}

// migratedHere holds the schemas this process migrated.
var migratedHere sync.Map

func dropSchema(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, schema string) {
	tb.Helper()
	execPastDeadlocks(ctx, tb, pool, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	migratedHere.Delete(schema)
}

// newName returns a schema or database name this process has not used:
// this binary's prefix, kind and a number.
func newName(kind string) string {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.created++
	return fmt.Sprintf("%s_%s%d", schemaPrefix(), kind, shared.created)
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// schemaPrefix names this test binary's schemas after its package, so
// packages running in parallel never share one.
func schemaPrefix() string {
	name := strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
	name = nonIdent.ReplaceAllString(strings.ToLower(name), "_")
	if len(name) > 30 {
		name = name[:30]
	}
	return "weirtest_" + name
}

// withDatabase points a connection string (URL or key=value) at database.
func withDatabase(connString, database string) (string, error) {
	if !strings.Contains(connString, "://") {
		return connString + " dbname=" + database, nil
	}
	u, err := url.Parse(connString)
	if err != nil {
		return "", fmt.Errorf("parsing %s: %w", EnvDatabaseURL, err)
	}
	u.Path = "/" + database
	return u.String(), nil
}

// QueryExecModes are every query exec mode of pgx, for tests that must
// hold under each.
var QueryExecModes = []pgx.QueryExecMode{
	pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec,
	pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
}

// ModePool returns a pool of its own to the tests' server whose
// connections use mode, of at most maxConns connections (0: pgxpool's
// default), closed when the test ends.
func ModePool(ctx context.Context, tb testing.TB, mode pgx.QueryExecMode, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	config, err := pgxpool.ParseConfig(URL(ctx, tb))
	require.NoError(tb, err)
	if maxConns > 0 {
		config.MaxConns = maxConns
	}
	config.ConnConfig.DefaultQueryExecMode = mode
	pool, err := pgxpool.NewWithConfig(ctx, config)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	return pool
}
