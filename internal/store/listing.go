package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/dbschema"
)

type listingSQL struct {
	runs, namespace string
}

func newListingSQL(n *dbschema.Names) listingSQL {
	return listingSQL{
		runs: "SELECT closed_at, created_at, generation, kind, namespace, queue, run_id, state, workflow_id FROM " + n.Run +
			" WHERE namespace = $1" +
			" AND ($2::text IS NULL OR kind = $2)" +
			" AND ($3::text IS NULL OR state = $3)" +
			" AND ($4::text IS NULL OR workflow_id LIKE $4)" +
			" AND ($5::timestamptz IS NULL OR created_at > $5)" +
			" AND ($6::timestamptz IS NULL OR created_at < $6)" +
			" AND ($7::timestamptz IS NULL OR (created_at, run_id) < ($7, $8::uuid))" +
			" ORDER BY created_at DESC, run_id DESC LIMIT $9",
		namespace: "INSERT INTO " + n.Namespace + " (name, description, retention)" +
			" VALUES ($1, $2, nullif($3::bigint, 0) * interval '1 microsecond')" +
			" ON CONFLICT (name) DO UPDATE SET description = excluded.description, retention = excluded.retention",
	}
}

// ListRunsParams filter runs; zero fields do not filter.
type ListRunsParams struct {
	Namespace, Kind, State string
	// WorkflowIDLike is a LIKE pattern for the workflow ID.
	WorkflowIDLike              string
	CreatedAfter, CreatedBefore time.Time
	// AfterCreatedAt and AfterRunID are the keyset position the page
	// starts after; zero for the first page.
	AfterCreatedAt time.Time
	AfterRunID     uuid.UUID
	Limit          int
}

// ListRuns reads up to Limit runs, newest first, into T: a struct of the
// columns closed_at, created_at, generation, kind, namespace, queue, run_id,
// state, workflow_id in that order (client.RunSummary).
func ListRuns[T any](ctx context.Context, s *Store, db DBTX, p ListRunsParams) ([]*T, error) {
	return collectRows(ctx, db, pgx.RowToAddrOfStructByPos[T], s.listing.runs, p.Namespace, orNull(p.Kind), orNull(p.State),
		orNull(p.WorkflowIDLike), orNull(p.CreatedAfter), orNull(p.CreatedBefore), orNull(p.AfterCreatedAt), orNull(p.AfterRunID), p.Limit)
}

// orNull is nil for v's zero value, else v.
func orNull[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// NamespaceParams are a namespace's options; a zero Retention keeps runs
// for ever.
type NamespaceParams struct {
	Name, Description string
	Retention         time.Duration
}

// UpsertNamespace records a namespace's options.
func (s *Store) UpsertNamespace(ctx context.Context, db DBTX, p NamespaceParams) error {
	return exec(ctx, db, s.listing.namespace, p.Name, p.Description, p.Retention.Microseconds())
}

// collectRows runs a query and scans its rows.
func collectRows[T any](ctx context.Context, db DBTX, scan pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scan)
}

// firstRow is the first of rows; pgx.ErrNoRows when there is none.
func firstRow[T any](rows []T, err error) (T, error) {
	if err == nil && len(rows) == 0 {
		err = pgx.ErrNoRows
	}
	if err != nil {
		var zero T
		return zero, err
	}
	return rows[0], nil
}
