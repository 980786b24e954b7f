// Package lazytx provides a pgx transaction on a pool whose BEGIN is sent
// with its first statement, in one pipelined batch (pgx's Batch.BeginTx),
// instead of in a round trip of its own as pgx's Pool.Begin does. Weir's
// hot path runs one short transaction per workflow step, and that round
// trip is a measurable share of a step.
//
// From its first statement on, a Tx is pgx's own transaction (commit,
// rollback, savepoints and all); before it, nothing has reached the server,
// so committing or rolling back is free.
package lazytx

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Tx is a transaction that begins with its first statement. It is not safe
// for concurrent use, as pgx's transactions are not.
type Tx struct {
	pool   *pgxpool.Pool
	inner  pgx.Tx // nil until the transaction began
	closed bool   // committed or rolled back before it began
}

var _ pgx.Tx = (*Tx)(nil)

// Begin returns a transaction on pool that has not sent anything yet.
func Begin(pool *pgxpool.Pool) *Tx {
	return &Tx{pool: pool}
}

// BeginFunc runs fn in a transaction on pool, as pgx.BeginFunc does: it
// commits when fn returns nil, and rolls back when fn returns an error or
// panics.
func BeginFunc(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) (err error) {
	tx := Begin(pool)
	defer func() {
		rollbackErr := tx.Rollback(ctx)
		if rollbackErr != nil && !errors.Is(rollbackErr, pgx.ErrTxClosed) {
			err = rollbackErr
		}
	}()
	if fnErr := fn(tx); fnErr != nil {
		_ = tx.Rollback(ctx) // fn's error is the one to return
		return fnErr
	}
	return tx.Commit(ctx)
}

// began reports whether BEGIN was sent, and the error to return if the
// transaction was closed before it began.
func (t *Tx) began() (bool, error) {
	if t.closed {
		return false, pgx.ErrTxClosed
	}
	return t.inner != nil, nil
}

// send sends b behind BEGIN and makes its transaction this one's. The
// returned results start at b's first statement.
func (t *Tx) send(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	first := &pgx.Batch{}
	first.BeginTx(pgx.TxOptions{})
	first.QueuedQueries = append(first.QueuedQueries, b.QueuedQueries...)
	conn, err := t.pool.Acquire(ctx)
	if err != nil {
		t.closed = true
		return failed{err: err}
	}
	// The connection is this transaction's from here on. Should sending
	// panic (an argument's encoder, a tracer), its state is unknown: it is
	// closed, not given back.
	defer func() {
		if r := recover(); r != nil {
			t.closed = true
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
			conn.Release()
			panic(r)
		}
	}()
	br := conn.SendBatch(ctx, first)
	t.inner = &connTx{Tx: br.Tx(), conn: conn}
	if _, err := br.Exec(); err != nil { // BEGIN's own result
		_ = br.Close() // reports the same error
		return failed{err: err}
	}
	return br
}

// connTx is pgx's transaction on a connection of the pool, which it gives
// back once the transaction ends, as pgxpool's transactions do.
type connTx struct {
	pgx.Tx
	conn *pgxpool.Conn
}

func (t *connTx) Commit(ctx context.Context) error {
	err := t.Tx.Commit(ctx)
	t.release()
	return err
}

func (t *connTx) Rollback(ctx context.Context) error {
	err := t.Tx.Rollback(ctx)
	t.release()
	return err
}

func (t *connTx) release() {
	if t.conn != nil {
		t.conn.Release()
		t.conn = nil
	}
}

// real begins the transaction in a round trip of its own, for the calls
// that cannot carry BEGIN.
func (t *Tx) real(ctx context.Context) (pgx.Tx, error) {
	if ok, err := t.began(); ok || err != nil {
		return t.inner, err
	}
	inner, err := t.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	t.inner = inner
	return inner, nil
}

// Exec runs sql in the transaction.
func (t *Tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if ok, err := t.began(); ok || err != nil {
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		return t.inner.Exec(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := t.send(ctx, b)
	tag, err := br.Exec()
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	return tag, err
}

// Query runs sql in the transaction.
func (t *Tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if ok, err := t.began(); ok || err != nil {
		if err != nil {
			return nil, err
		}
		return t.inner.Query(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := t.send(ctx, b)
	rows, err := br.Query()
	if err != nil {
		if rows != nil {
			rows.Close()
		}
		_ = br.Close() // reports the same error
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// QueryRow runs sql in the transaction.
func (t *Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if ok, err := t.began(); ok || err != nil {
		if err != nil {
			return failed{err: err}
		}
		return t.inner.QueryRow(ctx, sql, args...)
	}
	rows, err := t.Query(ctx, sql, args...)
	if err != nil {
		return failed{err: err}
	}
	return &row{rows: rows}
}

// SendBatch sends b in the transaction, behind BEGIN when it is the first
// statement.
func (t *Tx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if ok, err := t.began(); ok || err != nil {
		if err != nil {
			return failed{err: err}
		}
		return t.inner.SendBatch(ctx, b)
	}
	return t.send(ctx, b)
}

// Begin starts a pseudo nested transaction (a savepoint).
func (t *Tx) Begin(ctx context.Context) (pgx.Tx, error) {
	inner, err := t.real(ctx)
	if err != nil {
		return nil, err
	}
	return inner.Begin(ctx)
}

// CopyFrom runs a COPY in the transaction.
func (t *Tx) CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error) {
	inner, err := t.real(ctx)
	if err != nil {
		return 0, err
	}
	return inner.CopyFrom(ctx, tableName, columnNames, rowSrc)
}

// Prepare prepares a statement on the transaction's connection.
func (t *Tx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	inner, err := t.real(ctx)
	if err != nil {
		return nil, err
	}
	return inner.Prepare(ctx, name, sql)
}

// LargeObjects returns the transaction's large objects once it began (the
// zero value, which cannot be used, before).
func (t *Tx) LargeObjects() pgx.LargeObjects {
	if t.inner == nil {
		return pgx.LargeObjects{}
	}
	return t.inner.LargeObjects()
}

// Conn returns the transaction's connection once it began, nil before.
func (t *Tx) Conn() *pgx.Conn {
	if t.inner == nil {
		return nil
	}
	return t.inner.Conn()
}

// Commit commits the transaction. One that never began has nothing to
// commit.
func (t *Tx) Commit(ctx context.Context) error {
	if ok, err := t.began(); ok || err != nil {
		if err != nil {
			return err
		}
		return t.inner.Commit(ctx)
	}
	t.closed = true
	return nil
}

// Rollback rolls the transaction back; it returns an error matching
// pgx.ErrTxClosed after Commit or Rollback, as pgx's does.
func (t *Tx) Rollback(ctx context.Context) error {
	if ok, err := t.began(); ok || err != nil {
		if err != nil {
			return err
		}
		return t.inner.Rollback(ctx)
	}
	t.closed = true
	return nil
}
