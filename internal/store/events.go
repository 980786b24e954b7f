package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/weirhq/weir/internal/history"
)

// weir_event holds the runs' histories. A workflow task's boundary is stored
// in the row of the command that follows it (history.Row); Events and
// History unfold it, so every caller sees the history as events with IDs 1,
// 2, 3… without gaps.

// Events reads the events of run with IDs after afterID (0: from the first),
// in order, at most limit of them (0: all). Boundaries folded into rows are
// unfolded.
func (s *Store) Events(ctx context.Context, db DBTX, runID uuid.UUID, afterID int64, limit int) ([]history.Event, error) {
	// A row holds at most two events: limit rows hold the first limit
	// (LIMIT NULL: all of them).
	rows, err := db.Query(ctx, s.lookups.events, runID, afterID, orNull(limit))
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

// History reads run's whole history and checks that its IDs are 1, 2, 3…
// without gaps.
func (s *Store) History(ctx context.Context, db DBTX, runID uuid.UUID) ([]history.Event, error) {
	events, err := s.Events(ctx, db, runID, 0, 0)
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
