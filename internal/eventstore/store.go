// Package eventstore reads and writes weir_event, the runs' histories, in
// the two shapes the table can hold: one row per event, and (weir migration
// 004) a workflow task's boundary folded into the row of the command that
// follows it (history.Row). Readers always unfold, so every caller sees the
// same history, IDs 1, 2, 3… without gaps, whichever shape wrote it.
//
// Writers fold only once the table has the boundary column (rollout: code
// first, then the migration). A Store learns that the column exists from
// the catalog (Check: a worker's sweeper asks on every pass) or
// from a folded row it read; from then on it trusts it, and a statement
// that finds the column gone (the migration taken down) makes it forget.
package eventstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/history"
)

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store reads and writes one schema's weir_event. It is safe for concurrent
// use.
type Store struct {
	names   *dbschema.Names
	folding atomic.Bool // the boundary column was seen
}

// New returns the store of names' weir_event.
func New(names *dbschema.Names) *Store { return &Store{names: names} }

// Folding reports whether the table was last seen with the boundary column
// (without asking the database): writers fold boundaries when it is true.
func (s *Store) Folding() bool { return s.folding.Load() }

// Check asks the catalog whether the table has the boundary column, and
// reports whether it has. A worker's sweeper checks on every pass, so that
// writers start folding soon after the migration and stop soon after it is
// taken down.
func (s *Store) Check(ctx context.Context, q Querier) (bool, error) {
	var present bool
	err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_attribute"+
		" WHERE attrelid = to_regclass($1) AND attname = 'boundary' AND NOT attisdropped)", s.names.Event).Scan(&present)
	if err != nil {
		return false, fmt.Errorf("looking for the boundary column of %s: %w", s.names.Event, err)
	}
	s.folding.Store(present)
	return present, nil
}

// Forget makes the store stop trusting the boundary column when err says
// a statement found none (weir 004 taken down).
func (s *Store) Forget(err error) {
	if undefinedColumn(err) {
		s.folding.Store(false)
	}
}

func undefinedColumn(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedColumn
}

// Load reads the events of run with IDs after afterID (0: from the first),
// in order, at most limit of them (0: all). Boundaries folded into rows are
// unfolded.
//
// Until the store has seen the boundary column it reads it through the
// row's JSON (to_jsonb), which is NULL where the column does not exist: a
// reader that asked the catalog first could miss a boundary folded between
// the two statements (the migration and a worker's commit in between). The
// first folded row read, or a Check that finds the column, switches it to
// the column itself.
//
// A read that finds the column gone (004 taken down since the store saw it)
// forgets it and reads again through the row's JSON, so readers do not fail
// on a rollback.
func (s *Store) Load(ctx context.Context, q Querier, runID uuid.UUID, afterID int64, limit int) ([]history.Event, error) {
	folding := s.folding.Load()
	events, err := s.load(ctx, q, runID, afterID, limit, folding)
	if err != nil && folding && undefinedColumn(err) {
		s.folding.Store(false)
		events, err = s.load(ctx, q, runID, afterID, limit, false)
	}
	return events, err
}

func (s *Store) load(ctx context.Context, q Querier, runID uuid.UUID, afterID int64, limit int, folding bool) ([]history.Event, error) {
	boundary := "boundary"
	if !folding {
		boundary = "NULLIF(to_jsonb(e) -> 'boundary', 'null'::jsonb)"
	}
	sql := "SELECT event_id, type, attributes, created_at, " + boundary + " FROM " + s.names.Event + " e" +
		" WHERE run_id = $1 AND event_id > $2 ORDER BY event_id"
	args := []any{runID, afterID}
	if limit > 0 {
		// A row holds at most two events: limit rows hold the first limit.
		sql += " LIMIT $3"
		args = append(args, limit)
	}
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		events []history.Event
		row    history.Row
		typ    string
	)
	for rows.Next() {
		row = history.Row{}
		// jsonb into *[]byte: Postgres validated it; a json.RawMessage
		// target would have pgx decode it with encoding/json again.
		if err := rows.Scan(&row.ID, &typ, (*[]byte)(&row.Attributes), &row.Time, (*[]byte)(&row.Boundary)); err != nil {
			return nil, err
		}
		row.Type = history.EventType(typ)
		if row.Boundary != nil && !folding {
			folding = true
			s.folding.Store(true)
		}
		events = row.Unfold(events)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// The first row read may hold a boundary at afterID (the previous
	// page's last event): drop what is not after afterID.
	for len(events) > 0 && events[0].ID <= afterID {
		events = events[1:]
	}
	if limit > 0 && len(events) > limit {
		events = events[:limit]
	}
	return events, nil
}

// LoadAll reads run's whole history and checks that its IDs are 1, 2, 3…
// without gaps.
func (s *Store) LoadAll(ctx context.Context, q Querier, runID uuid.UUID) ([]history.Event, error) {
	events, err := s.Load(ctx, q, runID, 0, 0)
	if err != nil {
		return nil, err
	}
	for i, e := range events {
		if e.ID != int64(i+1) {
			return nil, fmt.Errorf("history of run %s has a gap: event %d at position %d", runID, e.ID, i+1)
		}
	}
	return events, nil
}
