// Package store is the home of weir's SQL: every statement weir sends to its
// own tables, built once per schema when a Store is made, run with typed
// parameter structs and scanned into typed rows. Callers never build SQL
// text; groups render their array statements from the write sets they
// commit, not from the text of single statements.
package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirhq/weir/internal/dbschema"
)

// DBTX runs statements: a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store is weir's statements for one schema. It is safe for concurrent use.
type Store struct {
	names     *dbschema.Names
	backfills backfillSQL
	inbox     inboxSQL
	inspect   inspectSQL
	listing   listingSQL
	lifecycle lifecycleSQL
	lookups   lookupSQL
	queries   querySQL
	runs      runStatements
	schedules scheduleSQL
	starts    startStatements
	sweeps    sweepSQL
	updates   updateSQL
	workers   workerSQL
}

// New builds the statements of the schema names qualifies.
func New(names *dbschema.Names) *Store {
	return &Store{
		names:     names,
		backfills: newBackfillSQL(names),
		inbox:     newInboxSQL(names),
		inspect:   newInspectSQL(names),
		listing:   newListingSQL(names),
		lifecycle: newLifecycleSQL(names),
		lookups:   newLookupSQL(names),
		queries:   newQuerySQL(names),
		runs:      newRunStatements(names),
		schedules: newScheduleSQL(names),
		starts:    newStartStatements(names),
		sweeps:    newSweepSQL(names),
		updates:   newUpdateSQL(names),
		workers:   newWorkerSQL(names),
	}
}

// exec runs a statement whose rows and tag nobody reads.
func exec(ctx context.Context, db DBTX, sql string, args ...any) error {
	_, err := db.Exec(ctx, sql, args...)
	return err
}

// Names are the qualified table names the statements use.
func (s *Store) Names() *dbschema.Names { return s.names }

// Now reads the database's clock (the transaction's start, in one).
func (s *Store) Now(ctx context.Context, db DBTX) (now time.Time, err error) {
	return now, db.QueryRow(ctx, "SELECT now()").Scan(&now)
}
