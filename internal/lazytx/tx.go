// Package lazytx provides a pgx transaction on a pool whose BEGIN is sent
// with its first statement, in one pipelined batch (pgx's Batch.BeginTx),
// instead of in a round trip of its own as pgx's Pool.Begin does: weir's
// hot path runs short transactions, whose latency is mostly round trips
// (docs/decisions/0015).
//
// From its first statement on, a Tx is pgx's own transaction (commit,
// rollback, savepoints and all); before it, nothing has reached the server,
// so committing or rolling back is free.
package lazytx

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Tx is a transaction that begins with its first statement. It is not safe
// for concurrent use, as pgx's transactions are not.
type Tx struct {
	pool   *pgxpool.Pool
	inner  pgx.Tx // nil until the transaction began
	closed bool   // committed or rolled back before it began, or committed in a batch

	// A COMMIT queued (QueueCommit) at the end of commitBatch, whose
	// length was then commitLen, and how it went.
	commit      commitState
	commitBatch *pgx.Batch
	commitLen   int
}

// commitState is where a COMMIT queued in a batch stands.
type commitState int

const (
	commitNone      commitState = iota // none queued, or its batch failed before it: a plain transaction
	commitQueued                       // queued; its batch not yet read
	commitDone                         // it committed
	commitFailedRan                    // it ran and failed: the transaction ended, nothing committed
)

// ErrCommittedDespiteCallback is what a batch carrying a queued COMMIT
// (QueueCommit) returns when the transaction committed but a callback of
// one of its statements failed on the client's side (the statement itself
// succeeded): the COMMIT was already on its way, so the callback could not
// prevent it. The error wraps the callback's.
var ErrCommittedDespiteCallback = errors.New("lazytx: the transaction committed, but a callback of its last batch failed")

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
	switch {
	case t.closed || t.commit == commitDone:
		return false, pgx.ErrTxClosed
	case t.commit == commitFailedRan:
		return false, pgx.ErrTxCommitRollback
	}
	return t.inner != nil, nil
}

// QueueCommit queues tx's COMMIT at the end of b, so that it rides in b's
// round trip; on a Tx that has not begun, BEGIN rides too. It queues nothing
// and returns false when tx is not a Tx, began in a round trip of its own (a
// savepoint before any statement), or has a COMMIT queued already. Nothing
// may be queued in b after it: SendBatch refuses the batch then.
//
// The COMMIT runs unless a statement before it fails in the database, so a
// check that must prevent the commit has to fail there, not in a callback;
// a callback that fails after its statement succeeded makes the batch
// return ErrCommittedDespiteCallback. Once b has run, Commit returns the
// outcome without sending anything: nil, or pgx.ErrTxCommitRollback if the
// COMMIT itself failed. If a statement before the COMMIT failed, the
// transaction stays open as that failure left it (unless it never began),
// and Commit works as without QueueCommit. After a successful COMMIT every
// statement fails with pgx.ErrTxClosed.
func QueueCommit(tx pgx.Tx, b *pgx.Batch) bool {
	t, ok := tx.(*Tx)
	if !ok || t.closed || t.commit != commitNone || t.commitBatch != nil {
		return false // one queued COMMIT per transaction
	}
	if _, ok := t.inner.(*connTx); !ok && t.inner != nil {
		return false // begun in a round trip of its own (pgxpool's Tx)
	}
	// A callback's own failure (its statement succeeded: the error is not
	// the database's) is held until the COMMIT's result is read, which
	// says whether the transaction committed.
	var held error
	for _, qq := range b.QueuedQueries {
		if qq.Fn == nil {
			continue
		}
		fn := qq.Fn
		qq.Fn = func(br pgx.BatchResults) error {
			err := fn(br)
			var pgErr *pgconn.PgError
			if err == nil || errors.As(err, &pgErr) {
				return err
			}
			if held == nil {
				held = err
			}
			return nil
		}
	}
	t.commit, t.commitBatch = commitQueued, b
	b.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			return pgx.ErrTxCommitRollback // the transaction had failed (it is rolled back)
		}
		t.commit = commitDone
		if held != nil {
			return fmt.Errorf("%w: %w", ErrCommittedDespiteCallback, held)
		}
		return nil
	})
	t.commitLen = b.Len()
	return true
}

// Committed reports whether the COMMIT queued on tx (QueueCommit) ran and
// succeeded, as its batch's results said: an error that Close returns
// after it (a failed read of what followed, a callback's) does not undo it.
func Committed(tx pgx.Tx) bool {
	t, ok := tx.(*Tx)
	return ok && t.commit == commitDone
}

// send sends b behind BEGIN and makes its transaction this one's. The
// returned results start at b's first statement.
func (t *Tx) send(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	first := &pgx.Batch{}
	first.BeginTx(pgx.TxOptions{})
	first.QueuedQueries = append(first.QueuedQueries, pgBatch(b).QueuedQueries...)
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
	br := conn.SendBatch(ctx, roomFor(conn.Conn(), first))
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
	if t.commit == commitQueued {
		// A COMMIT waits in a batch (QueueCommit before the first
		// statement): the transaction must be one that batch can end, so
		// it begins as a batch would, with nothing after its BEGIN.
		if err := t.send(ctx, &pgx.Batch{}).Close(); err != nil {
			return nil, err
		}
		return t.inner, nil
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
		return t.inner.Exec(ctx, sql, pgArgs(args)...)
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
		return t.inner.Query(ctx, sql, pgArgs(args)...)
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
		return t.inner.QueryRow(ctx, sql, pgArgs(args)...)
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
	if b != nil && b == t.commitBatch {
		switch {
		case t.commit != commitQueued:
			return failed{err: errors.New("lazytx: a batch carrying a COMMIT sent again")}
		case b.Len() != t.commitLen:
			return failed{err: errors.New("lazytx: statements queued after the batch's COMMIT (QueueCommit)")}
		}
	}
	if ok, err := t.began(); ok || err != nil {
		if err != nil {
			return failed{err: err}
		}
		converted := pgBatch(b)
		if c, ok := t.inner.(*connTx); ok {
			converted = roomFor(c.conn.Conn(), converted)
		}
		if t.commit == commitQueued && b == t.commitBatch {
			return &commitResults{BatchResults: t.inner.SendBatch(ctx, converted), tx: t}
		}
		return t.inner.SendBatch(ctx, converted)
	}
	br := t.send(ctx, b)
	if t.commit == commitQueued && b == t.commitBatch && t.inner != nil {
		// The whole transaction in one round trip: BEGIN, b, COMMIT.
		return &commitResults{BatchResults: br, tx: t}
	}
	return br
}

// commitResults are the results of a batch that carries a queued COMMIT.
type commitResults struct {
	pgx.BatchResults
	tx *Tx
}

// Close reads the results; when the COMMIT did not happen because a
// statement before it failed, the transaction is still open (aborted, or
// usable again after ROLLBACK TO SAVEPOINT): it goes on as a transaction
// without a queued COMMIT. When the COMMIT ran and failed, it has ended:
// Commit will say so.
func (r *commitResults) Close() error {
	err := r.BatchResults.Close()
	t := r.tx
	if t.commit != commitQueued {
		return err // committed (or closed twice)
	}
	switch pgConn := t.inner.Conn().PgConn(); {
	case pgConn.IsClosed():
		// The connection is gone (its last status is stale): the outcome
		// is unknown, and Commit reports that nothing is known committed.
	case pgConn.TxStatus() == 'T' || pgConn.TxStatus() == 'E':
		t.commit = commitNone // the batch stays t.commitBatch: never sent again
	default: // 'I': the COMMIT ran and failed, which ended the transaction
		t.commit = commitFailedRan
	}
	return err
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
	return t.end(ctx, pgx.Tx.Commit, pgx.ErrTxCommitRollback)
}

// Rollback rolls the transaction back; it returns an error matching
// pgx.ErrTxClosed after Commit or Rollback, as pgx's does.
func (t *Tx) Rollback(ctx context.Context) error { return t.end(ctx, pgx.Tx.Rollback, nil) }

// end ends the transaction with end (pgx's Commit or Rollback) once it
// began; notCommitted is what end returns for a queued COMMIT that did not
// commit (endQueued).
func (t *Tx) end(ctx context.Context, end func(pgx.Tx, context.Context) error, notCommitted error) error {
	if t.commit != commitNone {
		return t.endQueued(ctx, notCommitted)
	}
	if ok, err := t.began(); ok || err != nil {
		if err != nil {
			return err
		}
		return end(t.inner, ctx)
	}
	t.closed = true
	return nil
}

// endQueued ends a transaction whose COMMIT was queued in a batch
// (QueueCommit). If it committed, there is nothing to send: its connection
// goes back to the pool and the first end returns nil (later ones
// pgx.ErrTxClosed). If it did not (the batch failed or never ran), a
// ROLLBACK makes sure the server ended it, and notCommitted is returned:
// Commit's pgx.ErrTxCommitRollback, Rollback's nil.
func (t *Tx) endQueued(ctx context.Context, notCommitted error) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	if t.inner == nil {
		return notCommitted // the batch carrying the COMMIT, the first, never went
	}
	inner, ok := t.inner.(*connTx) // QueueCommit queues only on one, and real begins one
	if !ok {
		return errors.Join(notCommitted, t.inner.Rollback(ctx))
	}
	if t.commit == commitDone {
		inner.release()
		return nil
	}
	// Aborted (a statement failed) or ended (COMMIT failed, or the batch
	// was never sent): ROLLBACK is right either way (on an ended one the
	// server only warns).
	if err := inner.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return err
	}
	return notCommitted
}
