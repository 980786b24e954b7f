// Package eventstore reads weir_event, the runs' histories. A workflow
// task's boundary is stored in the row of the command that follows it
// (history.Row); readers unfold it, so every caller sees the history as
// events with IDs 1, 2, 3… without gaps.
package eventstore

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/history"
)

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store reads one schema's weir_event. It is safe for concurrent use.
type Store struct {
	names *dbschema.Names
}

// New returns the store of names' weir_event.
func New(names *dbschema.Names) *Store { return &Store{names: names} }

// Load reads the events of run with IDs after afterID (0: from the first),
// in order, at most limit of them (0: all). Boundaries folded into rows are
// unfolded.
func (s *Store) Load(ctx context.Context, q Querier, runID uuid.UUID, afterID int64, limit int) ([]history.Event, error) {
	sql := "SELECT event_id, type, attributes, created_at, boundary FROM " + s.names.Event +
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
