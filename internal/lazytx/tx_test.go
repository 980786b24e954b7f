package lazytx_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/lazytx"
)

func TestMain(m *testing.M) {
	dbtest.Main(m)
}

// tracer counts what the pool sends: single statements by their SQL and
// batches.
type tracer struct {
	mu      sync.Mutex
	queries []string
	batches int
}

func (tr *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.queries = append(tr.queries, strings.ToLower(data.SQL))
	return ctx
}

func (*tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (tr *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.batches++
	return ctx
}

func (*tracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (tr *tracer) sent() ([]string, int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.queries...), tr.batches
}

// setup returns a pool of its own (so its statistics are this test's), its
// tracer, and a table in a schema of the test's own.
func setup(t *testing.T) (*pgxpool.Pool, *tracer, string) {
	t.Helper()
	ctx := t.Context()
	schema := dbtest.EmptySchema(ctx, t)
	config, err := pgxpool.ParseConfig(dbtest.URL(ctx, t))
	require.NoError(t, err)
	tr := &tracer{}
	config.ConnConfig.Tracer = tr
	config.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, config)
	require.NoError(t, err)
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() {
			pool.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Error("closing the pool hung: a connection was never given back")
		}
	})
	table := pgx.Identifier{schema, "item"}.Sanitize()
	_, err = pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()+"; CREATE TABLE "+table+" (id int PRIMARY KEY)")
	require.NoError(t, err)
	tr.mu.Lock()
	tr.queries, tr.batches = nil, 0
	tr.mu.Unlock()
	return pool, tr, table
}

func count(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

// firstStatements are the ways a transaction's first statement can be sent.
var firstStatements = map[string]func(ctx context.Context, tx pgx.Tx, table string) error{
	"Exec": func(ctx context.Context, tx pgx.Tx, table string) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ($1)", 1)
		return err
	},
	"Query": func(ctx context.Context, tx pgx.Tx, table string) error {
		rows, err := tx.Query(ctx, "INSERT INTO "+table+" VALUES ($1) RETURNING id", 1)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err == nil && len(ids) != 1 {
			err = errors.New("no row returned")
		}
		return err
	},
	"QueryRow": func(ctx context.Context, tx pgx.Tx, table string) error {
		var id int
		return tx.QueryRow(ctx, "INSERT INTO "+table+" VALUES ($1) RETURNING id", 1).Scan(&id)
	},
	"SendBatch": func(ctx context.Context, tx pgx.Tx, table string) error {
		b := &pgx.Batch{}
		b.Queue("INSERT INTO " + table + " VALUES (1)")
		var id int
		b.Queue("SELECT id FROM "+table+" WHERE id = $1", 1).QueryRow(func(row pgx.Row) error { return row.Scan(&id) })
		return tx.SendBatch(ctx, b).Close()
	},
}

// TestFirstStatementBegins runs each kind of first statement, then a second
// one, and commits or rolls back. The first statement runs inside the
// transaction (a rollback undoes it), BEGIN is never sent on its own, and
// the connection goes back to the pool.
func TestFirstStatementBegins(t *testing.T) {
	t.Parallel()
	for name, first := range firstStatements {
		for _, commit := range []bool{true, false} {
			t.Run(name+map[bool]string{true: "/Commit", false: "/Rollback"}[commit], func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				pool, tr, table := setup(t)

				tx := lazytx.Begin(pool)
				require.Nil(t, tx.Conn(), "no connection before the first statement")
				require.NoError(t, first(ctx, tx, table))
				require.NotNil(t, tx.Conn())
				_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES (2)")
				require.NoError(t, err)
				var inTx bool
				require.NoError(t, tx.QueryRow(ctx, "SELECT now() = statement_timestamp()").Scan(&inTx))
				require.False(t, inTx, "the statements share the transaction's start time")
				if commit {
					require.NoError(t, tx.Commit(ctx))
					require.Equal(t, 2, count(t, pool, table))
				} else {
					require.NoError(t, tx.Rollback(ctx))
					require.Equal(t, 0, count(t, pool, table), "the rollback undid the first statement too")
				}
				require.ErrorIs(t, tx.Rollback(ctx), pgx.ErrTxClosed)
				require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxClosed)
				require.Zero(t, pool.Stat().AcquiredConns(), "the connection went back to the pool")

				queries, batches := tr.sent()
				require.NotContains(t, queries, "begin", "BEGIN went with the first statement")
				require.GreaterOrEqual(t, batches, 1)
			})
		}
	}
}

// TestFirstStatementFails aborts the transaction: Commit reports the
// rollback, and nothing is written.
func TestFirstStatementFails(t *testing.T) {
	t.Parallel()
	for name, first := range firstStatements {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool, _, table := setup(t)
			_, err := pool.Exec(ctx, "INSERT INTO "+table+" VALUES (1)")
			require.NoError(t, err)

			tx := lazytx.Begin(pool)
			err = first(ctx, tx, table)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, "23505", pgErr.Code, "a duplicate key")
			_, err = tx.Exec(ctx, "INSERT INTO "+table+" VALUES (2)")
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, "25P02", pgErr.Code, "the transaction is aborted")
			require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxCommitRollback)
			require.Equal(t, 1, count(t, pool, table))
			require.Zero(t, pool.Stat().AcquiredConns())
		})
	}
}

// TestNothingSent commits and rolls back transactions that ran nothing,
// without a connection.
func TestNothingSent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, tr, _ := setup(t)
	acquired := pool.Stat().AcquireCount()

	require.NoError(t, lazytx.Begin(pool).Commit(ctx))
	require.NoError(t, lazytx.Begin(pool).Rollback(ctx))
	require.NoError(t, lazytx.BeginFunc(ctx, pool, func(pgx.Tx) error { return nil }))
	require.Equal(t, acquired, pool.Stat().AcquireCount())
	queries, batches := tr.sent()
	require.Empty(t, queries)
	require.Zero(t, batches)
}

// TestSavepoints nests pseudo transactions before and after the first
// statement.
func TestSavepoints(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _, table := setup(t)

	tx := lazytx.Begin(pool)
	sp, err := tx.Begin(ctx) // before any statement: BEGIN goes on its own
	require.NoError(t, err)
	_, err = sp.Exec(ctx, "INSERT INTO "+table+" VALUES (1)")
	require.NoError(t, err)
	require.NoError(t, sp.Rollback(ctx))
	sp, err = tx.Begin(ctx)
	require.NoError(t, err)
	_, err = sp.Exec(ctx, "INSERT INTO "+table+" VALUES (2)")
	require.NoError(t, err)
	require.NoError(t, sp.Commit(ctx))
	require.NoError(t, tx.Commit(ctx))

	var ids []int
	rows, err := pool.Query(ctx, "SELECT id FROM "+table)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{2}, ids)
}

// TestBeginFunc commits on nil, rolls back on an error and on a panic, and
// returns the connection each time.
func TestBeginFunc(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _, table := setup(t)
	insert := func(id int) func(pgx.Tx) error {
		return func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ($1)", id)
			return err
		}
	}

	require.NoError(t, lazytx.BeginFunc(ctx, pool, insert(1)))
	boom := errors.New("boom")
	err := lazytx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		require.NoError(t, insert(2)(tx))
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Panics(t, func() {
		_ = lazytx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			require.NoError(t, insert(3)(tx))
			panic("boom")
		})
	})
	require.Equal(t, 1, count(t, pool, table))
	require.Zero(t, pool.Stat().AcquiredConns())
}

// TestPoolExhausted reports the acquire error from the first statement,
// and the transaction closes cleanly.
func TestPoolExhausted(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _, table := setup(t)
	held := make([]*pgxpool.Conn, 0, 2)
	for range 2 {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		held = append(held, c)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	tx := lazytx.Begin(pool)
	_, err := tx.Exec(short, "INSERT INTO "+table+" VALUES (1)")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Error(t, tx.Commit(ctx))
	for _, c := range held {
		c.Release()
	}
	require.Equal(t, 0, count(t, pool, table))
	require.Zero(t, pool.Stat().AcquiredConns())
}

// panicking is an argument whose encoding panics.
type panicking struct{}

func (panicking) Value() (driver.Value, error) { panic("encoding panicked") }

// TestFirstStatementPanics closes the connection a panicking first
// statement took, instead of leaking it.
func TestFirstStatementPanics(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _, _ := setup(t)

	// Any panic: with a tracer, pgx's own deferred tracing panics in turn.
	require.Panics(t, func() {
		_ = lazytx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "SELECT $1::text", panicking{})
			return err
		})
	})
	// A closed connection leaves the pool asynchronously.
	require.Eventually(t, func() bool { return pool.Stat().AcquiredConns() == 0 }, 5*time.Second, 10*time.Millisecond,
		"the connection was not leaked")
}

// TestFirstStatementErrorOnce reports a failed first query's error once.
func TestFirstStatementErrorOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _, _ := setup(t)

	tx := lazytx.Begin(pool)
	var n int
	err := tx.QueryRow(ctx, "SELECT 1/0").Scan(&n)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, pgErr.Error(), err.Error(), "the error is not doubled")
	require.NoError(t, tx.Rollback(ctx))
	require.Zero(t, pool.Stat().AcquiredConns())
}

// begunWithOne returns a transaction whose first statement, sent, inserted
// row 1 into table.
func begunWithOne(t *testing.T, pool *pgxpool.Pool, table string) *lazytx.Tx {
	t.Helper()
	tx := lazytx.Begin(pool)
	_, err := tx.Exec(t.Context(), "INSERT INTO "+table+" VALUES (1)")
	require.NoError(t, err)
	return tx
}

// TestQueueCommit: a COMMIT queued in a transaction's last batch commits it
// in that batch's round trip; Commit then sends nothing, and nothing more
// runs in (or after) the transaction.
func TestQueueCommit(t *testing.T) {
	t.Parallel()

	t.Run("CommitsWithTheBatch", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool, tr, table := setup(t)
		tx := begunWithOne(t, pool, table)
		b := &pgx.Batch{}
		b.Queue("INSERT INTO " + table + " VALUES (2)")
		require.True(t, lazytx.QueueCommit(tx, b))
		require.False(t, lazytx.QueueCommit(tx, b), "one COMMIT per transaction")
		require.NoError(t, tx.SendBatch(ctx, b).Close())
		require.Equal(t, 2, count(t, pool, table), "committed with the batch, before Commit")

		_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES (3)")
		require.ErrorIs(t, err, pgx.ErrTxClosed, "nothing runs after the commit")
		require.NoError(t, tx.Commit(ctx))
		require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxClosed)
		require.ErrorIs(t, tx.Rollback(ctx), pgx.ErrTxClosed)
		require.Equal(t, 2, count(t, pool, table))
		require.Zero(t, pool.Stat().AcquiredConns(), "the connection went back to the pool")
		queries, _ := tr.sent()
		require.NotContains(t, queries, "commit", "no COMMIT of its own")
	})

	t.Run("InBeginFunc", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool, tr, table := setup(t)
		require.NoError(t, lazytx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			b.Queue("INSERT INTO " + table + " VALUES (1)")
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
			b = &pgx.Batch{}
			b.Queue("INSERT INTO " + table + " VALUES (2)")
			require.True(t, lazytx.QueueCommit(tx, b))
			return tx.SendBatch(ctx, b).Close()
		}))
		require.Equal(t, 2, count(t, pool, table))
		require.Zero(t, pool.Stat().AcquiredConns())
		queries, _ := tr.sent()
		require.NotContains(t, queries, "commit")
		require.NotContains(t, queries, "rollback")
	})

	// Queued before the transaction began, the COMMIT makes its first
	// batch the whole transaction: BEGIN, the statements and COMMIT in one
	// round trip, and Commit sends nothing.
	t.Run("WholeTransactionInOneBatch", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool, tr, table := setup(t)
		require.NoError(t, lazytx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			b.Queue("INSERT INTO " + table + " VALUES (1)")
			b.Queue("INSERT INTO " + table + " VALUES (2)")
			require.True(t, lazytx.QueueCommit(tx, b))
			require.False(t, lazytx.QueueCommit(tx, b), "one COMMIT per transaction")
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
			require.Equal(t, 2, count(t, pool, table), "committed with the batch")
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES (3)")
			require.ErrorIs(t, err, pgx.ErrTxClosed, "nothing runs after the commit")
			return nil
		}))
		require.Equal(t, 2, count(t, pool, table))
		require.Zero(t, pool.Stat().AcquiredConns())
		queries, batches := tr.sent()
		require.Equal(t, 1, batches, "one round trip")
		require.NotContains(t, queries, "rollback")
		require.NotContains(t, queries, "commit", "no COMMIT of its own")
	})

	// The same when a statement of that first batch fails: nothing
	// commits, Commit says so, and the connection goes back.
	t.Run("WholeTransactionFails", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool, _, table := setup(t)
		tx := lazytx.Begin(pool)
		b := &pgx.Batch{}
		b.Queue("INSERT INTO " + table + " VALUES (1)")
		b.Queue("INSERT INTO " + table + " VALUES (1)") // a duplicate
		require.True(t, lazytx.QueueCommit(tx, b))
		var pgErr *pgconn.PgError
		require.ErrorAs(t, tx.SendBatch(ctx, b).Close(), &pgErr)
		require.Equal(t, "23505", pgErr.Code)
		require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxCommitRollback)
		require.Zero(t, count(t, pool, table), "nothing committed")
		require.Zero(t, pool.Stat().AcquiredConns())
	})

	// A transaction whose COMMIT was queued but that never sent anything
	// ends without a round trip.
	t.Run("QueuedButNeverSent", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool, tr, table := setup(t)
		for _, commit := range []bool{false, true} {
			tx := lazytx.Begin(pool)
			b := &pgx.Batch{}
			b.Queue("INSERT INTO " + table + " VALUES (1)")
			require.True(t, lazytx.QueueCommit(tx, b))
			if commit {
				require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxCommitRollback, "the queued COMMIT never ran")
			} else {
				require.NoError(t, tx.Rollback(ctx))
			}
			require.ErrorIs(t, tx.Rollback(ctx), pgx.ErrTxClosed)
		}
		require.Zero(t, count(t, pool, table))
		_, batches := tr.sent()
		require.Zero(t, batches, "nothing was sent")
	})

	// A COMMIT queued before the transaction began still ends it when a
	// call that needs a begun transaction (a savepoint) comes first, and a
	// batch sent before the COMMIT's own leaves the COMMIT queued.
	t.Run("QueuedThenOtherStatementsFirst", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool, tr, table := setup(t)
		tx := lazytx.Begin(pool)
		b := &pgx.Batch{}
		b.Queue("INSERT INTO " + table + " VALUES (3)")
		require.True(t, lazytx.QueueCommit(tx, b))
		savepoint, err := tx.Begin(ctx)
		require.NoError(t, err)
		_, err = savepoint.Exec(ctx, "INSERT INTO "+table+" VALUES (1)")
		require.NoError(t, err)
		require.NoError(t, savepoint.Commit(ctx))
		other := &pgx.Batch{}
		other.Queue("INSERT INTO " + table + " VALUES (2)")
		require.NoError(t, tx.SendBatch(ctx, other).Close())
		require.NoError(t, tx.SendBatch(ctx, b).Close())
		require.Equal(t, 3, count(t, pool, table), "committed with its batch")
		require.NoError(t, tx.Commit(ctx))
		require.Zero(t, pool.Stat().AcquiredConns())
		queries, _ := tr.sent()
		require.NotContains(t, queries, "commit", "no COMMIT of its own")
	})

	// The COMMIT does not run (a statement before it failed) or fails
	// itself (a deferred constraint): nothing commits, Commit says so, and
	// the connection goes back to the pool in a usable state.
	for _, commitFails := range []bool{false, true} {
		t.Run(map[bool]string{false: "StatementFails", true: "CommitFails"}[commitFails], func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool, _, table := setup(t)
			deferred := strings.TrimSuffix(table, `"`) + `_deferred"`
			_, err := pool.Exec(ctx, "CREATE TABLE "+deferred+" (id int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
			require.NoError(t, err)
			tx := lazytx.Begin(pool)
			b := &pgx.Batch{}
			b.Queue("INSERT INTO " + table + " VALUES (1)")
			b.Queue("INSERT INTO " + deferred + " VALUES (1)")
			require.NoError(t, tx.SendBatch(ctx, b).Close())
			b = &pgx.Batch{}
			if commitFails {
				b.Queue("INSERT INTO " + deferred + " VALUES (1)") // fine until COMMIT checks it
			} else {
				b.Queue("INSERT INTO " + table + " VALUES (1)")
			}
			require.True(t, lazytx.QueueCommit(tx, b))
			var pgErr *pgconn.PgError
			require.ErrorAs(t, tx.SendBatch(ctx, b).Close(), &pgErr)
			require.Equal(t, "23505", pgErr.Code)
			if commitFails {
				// The transaction ended: nothing more runs, least of all
				// outside it.
				_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES (2)")
				require.ErrorIs(t, err, pgx.ErrTxCommitRollback)
			}
			require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxCommitRollback)
			require.ErrorIs(t, tx.Rollback(ctx), pgx.ErrTxClosed)
			require.Zero(t, count(t, pool, table), "nothing committed")
			require.Zero(t, count(t, pool, deferred))
			require.Zero(t, pool.Stat().AcquiredConns())
		})
	}

	// A callback cannot stop the pipelined COMMIT: when one fails after its
	// statement succeeded, the batch says the transaction committed anyway.
	// A check that must stop it fails in the database instead.
	t.Run("CallbackFailsAfterItsStatement", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool, _, table := setup(t)
		tx := begunWithOne(t, pool, table)
		b := &pgx.Batch{}
		boom := errors.New("boom")
		b.Queue("INSERT INTO " + table + " VALUES (2)").Exec(func(pgconn.CommandTag) error { return boom })
		var later bool
		b.Queue("SELECT 1").QueryRow(func(row pgx.Row) error { later = true; var one int; return row.Scan(&one) })
		require.True(t, lazytx.QueueCommit(tx, b))
		err := tx.SendBatch(ctx, b).Close()
		require.ErrorIs(t, err, lazytx.ErrCommittedDespiteCallback)
		require.ErrorIs(t, err, boom)
		require.True(t, later, "the callbacks after the failed one still ran")
		require.NoError(t, tx.Commit(ctx), "it committed")
		require.Equal(t, 2, count(t, pool, table))
		require.Zero(t, pool.Stat().AcquiredConns())
	})

	t.Run("NothingAfterTheCommit", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool, _, table := setup(t)
		tx := begunWithOne(t, pool, table)
		b := &pgx.Batch{}
		require.True(t, lazytx.QueueCommit(tx, b))
		b.Queue("INSERT INTO " + table + " VALUES (2)") // would run outside the transaction
		require.ErrorContains(t, tx.SendBatch(ctx, b).Close(), "after the batch's COMMIT")
		require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxCommitRollback)
		require.Zero(t, count(t, pool, table))
		require.Zero(t, pool.Stat().AcquiredConns())
	})

	// A statement before the COMMIT fails inside a savepoint: the
	// transaction is still open, so the caller rolls back to the savepoint
	// and goes on, and Commit commits what is left.
	t.Run("GoesOnAfterAFailedBatch", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool, tr, table := setup(t)
		tx := lazytx.Begin(pool)
		b := &pgx.Batch{}
		b.Queue("INSERT INTO " + table + " VALUES (1)")
		b.Queue("SAVEPOINT before_batch")
		require.NoError(t, tx.SendBatch(ctx, b).Close())
		b = &pgx.Batch{}
		b.Queue("INSERT INTO " + table + " VALUES (1)") // a duplicate
		require.True(t, lazytx.QueueCommit(tx, b))
		require.Error(t, tx.SendBatch(ctx, b).Close())
		_, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT before_batch")
		require.NoError(t, err)
		require.ErrorContains(t, tx.SendBatch(ctx, b).Close(), "sent again", "its COMMIT would go untracked")
		_, err = tx.Exec(ctx, "INSERT INTO "+table+" VALUES (2)")
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, 2, count(t, pool, table))
		require.Zero(t, pool.Stat().AcquiredConns())
		queries, _ := tr.sent()
		require.Contains(t, queries, "commit", "the transaction's own COMMIT")
	})

	t.Run("RolledBackBeforeTheBatchRan", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool, _, table := setup(t)
		tx := begunWithOne(t, pool, table)
		b := &pgx.Batch{}
		require.True(t, lazytx.QueueCommit(tx, b))
		require.NoError(t, tx.Rollback(ctx))
		require.Zero(t, count(t, pool, table))
		require.Zero(t, pool.Stat().AcquiredConns())
	})

	t.Run("NotATxThatBeganWithABatch", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool, _, _ := setup(t)
		b := &pgx.Batch{}
		plain, err := pool.Begin(ctx)
		require.NoError(t, err)
		require.False(t, lazytx.QueueCommit(plain, b), "pgx's own")
		require.NoError(t, plain.Rollback(ctx))
		tx := lazytx.Begin(pool)
		savepoint, err := tx.Begin(ctx) // begins in a round trip of its own
		require.NoError(t, err)
		require.False(t, lazytx.QueueCommit(tx, b))
		require.NoError(t, savepoint.Rollback(ctx))
		require.NoError(t, tx.Rollback(ctx))
		require.Zero(t, b.Len())
	})
}

// TestNoSend: every call on a NoSend transaction fails with its error.
func TestNoSend(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	errNo := errors.New("nothing may be sent")
	tx := lazytx.NoSend(errNo)
	require.False(t, tx.Tried())
	_, err := tx.Exec(ctx, "SELECT 1")
	require.True(t, tx.Tried())
	require.ErrorIs(t, err, errNo)
	_, err = tx.Query(ctx, "SELECT 1")
	require.ErrorIs(t, err, errNo)
	var one int
	require.ErrorIs(t, tx.QueryRow(ctx, "SELECT 1").Scan(&one), errNo)
	b := &pgx.Batch{}
	b.Queue("SELECT 1")
	br := tx.SendBatch(ctx, b)
	_, err = br.Exec()
	require.ErrorIs(t, err, errNo)
	require.ErrorIs(t, br.Close(), errNo)
	_, err = tx.Begin(ctx)
	require.ErrorIs(t, err, errNo)
	_, err = tx.Prepare(ctx, "s", "SELECT 1")
	require.ErrorIs(t, err, errNo)
	_, err = tx.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"a"}, pgx.CopyFromRows(nil))
	require.ErrorIs(t, err, errNo)
	require.ErrorIs(t, tx.Commit(ctx), errNo)
	require.ErrorIs(t, tx.Rollback(ctx), errNo)
	require.Nil(t, tx.Conn())
}

// TestBatchAfterConnectionLost sends a batch large enough to make room in
// the write buffer on a connection that a statement cut off by its context
// closed: the batch fails and writes nothing. (Room is then not made: the
// closed connection's frontend is pgx's closing goroutine's. The race that
// making it would be depends on that goroutine's timing; the fault suite
// under -race met it, this test does not reliably.)
func TestBatchAfterConnectionLost(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _, table := setup(t)
	ids := make([]string, 5000)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	err := lazytx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			return err
		}
		// A statement cut off by its context: pgx closes the connection
		// from a goroutine of its own, which sends Terminate.
		cut, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := tx.Exec(cut, "SELECT pg_sleep(5)")
		require.Error(t, err, "the statement was cut off")
		require.True(t, tx.Conn().PgConn().IsClosed())
		b := &pgx.Batch{}
		b.Queue("INSERT INTO "+table+" SELECT unnest($1::text[])::int", ids)
		b.Queue("SELECT count(*) FROM "+table+" WHERE id::text = ANY($1)", ids)
		return tx.SendBatch(ctx, b).Close()
	})
	require.Error(t, err)
	require.Zero(t, count(t, pool, table))
}
