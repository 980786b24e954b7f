package lazytx

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// batchRows are the rows of a first statement sent behind BEGIN. The batch
// is closed, which frees the connection for the transaction's next
// statement, once the rows are: when Next runs out or on Close.
type batchRows struct {
	pgx.Rows
	br       pgx.BatchResults
	done     bool
	closeErr error
}

func (r *batchRows) finish() {
	if r.done {
		return
	}
	r.done = true
	r.Rows.Close()
	r.closeErr = r.br.Close()
}

func (r *batchRows) Next() bool {
	if !r.done && r.Rows.Next() {
		return true
	}
	r.finish()
	return false
}

func (r *batchRows) Close() { r.finish() }

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.closeErr
}

// row is QueryRow's result over a first statement's rows, scanned as pgx's
// QueryRow is.
type row struct {
	rows pgx.Rows
}

func (r *row) Scan(dest ...any) error {
	rows := r.rows
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// failed answers every call with one error: a row, rows or batch results
// whose statement could not be sent.
type failed struct {
	err error
}

func (f failed) Scan(...any) error                { return f.err }
func (f failed) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, f.err }
func (f failed) Query() (pgx.Rows, error)         { return nil, f.err }
func (f failed) QueryRow() pgx.Row                { return f }
func (f failed) Close() error                     { return f.err }
func (f failed) Tx() pgx.Tx                       { return nil }
