package lazytx

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// NoSendTx is a transaction on which every call fails with one error,
// sending nothing: for code that may only queue statements in batches that
// its caller sends (a first task run ahead of its start, before the start's
// BEGIN), so that a statement it would send early fails it instead, and the
// caller can tell that from the code's own failures (Tried). Its Conn is
// nil and its LargeObjects unusable: there is no connection.
type NoSendTx struct {
	f     failed
	tried atomic.Bool
}

var _ pgx.Tx = (*NoSendTx)(nil)

// NoSend returns a NoSendTx whose calls fail with err.
func NoSend(err error) *NoSendTx { return &NoSendTx{f: failed{err}} }

// Tried reports whether anything was tried on t.
func (t *NoSendTx) Tried() bool { return t.tried.Load() }

func (t *NoSendTx) fail() error {
	t.tried.Store(true)
	return t.f.err
}

func (t *NoSendTx) Begin(context.Context) (pgx.Tx, error) { return nil, t.fail() }

func (t *NoSendTx) Commit(context.Context) error { return t.fail() }

func (t *NoSendTx) Rollback(context.Context) error { return t.fail() }

func (t *NoSendTx) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, t.fail()
}

func (t *NoSendTx) SendBatch(context.Context, *pgx.Batch) pgx.BatchResults {
	_ = t.fail()
	return t.f
}

func (t *NoSendTx) LargeObjects() pgx.LargeObjects {
	_ = t.fail()
	return pgx.LargeObjects{}
}

func (t *NoSendTx) Prepare(context.Context, string, string) (*pgconn.StatementDescription, error) {
	return nil, t.fail()
}

func (t *NoSendTx) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, t.fail()
}

func (t *NoSendTx) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, t.fail() }

func (t *NoSendTx) QueryRow(context.Context, string, ...any) pgx.Row {
	_ = t.fail()
	return t.f
}

func (t *NoSendTx) Conn() *pgx.Conn {
	t.tried.Store(true)
	return nil
}
