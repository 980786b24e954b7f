package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/dbschema"
)

type backfillSQL struct {
	insert, get, getForUpdate, byRange, list, save, fail string
}

const backfillColumns = "backfill_id, namespace, schedule_id, range_start, range_end, state, total, started, next_due_at, error, created_at, updated_at"

func newBackfillSQL(n *dbschema.Names) backfillSQL {
	get := "SELECT " + backfillColumns + " FROM " + n.Backfill + " WHERE backfill_id = $1"
	return backfillSQL{
		insert: "INSERT INTO " + n.Backfill + " (backfill_id, namespace, schedule_id, range_start, range_end, state, total, next_due_at)" +
			" VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (namespace, schedule_id, range_start, range_end) DO NOTHING",
		get:          get + " AND namespace = $2",
		getForUpdate: get + " FOR UPDATE",
		byRange: "SELECT " + backfillColumns + " FROM " + n.Backfill +
			" WHERE namespace = $1 AND schedule_id = $2 AND range_start = $3 AND range_end = $4",
		list: "SELECT " + backfillColumns + " FROM " + n.Backfill +
			" WHERE namespace = $1 AND schedule_id = $2 ORDER BY created_at DESC, backfill_id",
		save: "UPDATE " + n.Backfill + " SET state = $2, next_due_at = $3, started = $4, error = $5, updated_at = now()" +
			" WHERE backfill_id = $1",
		fail: "UPDATE " + n.Backfill + " SET error = $2, updated_at = now() WHERE backfill_id = $1 AND state = 'running'",
	}
}

// Backfill is a weir_backfill row.
type Backfill struct {
	ID                    uuid.UUID
	Namespace, ScheduleID string
	Start, End            time.Time
	State                 string
	Total, Started        int64
	NextDueAt             *time.Time
	Error                 string
	CreatedAt, UpdatedAt  time.Time
}

func scanBackfill(row pgx.CollectableRow) (*Backfill, error) {
	var b Backfill
	return &b, row.Scan(&b.ID, &b.Namespace, &b.ScheduleID, &b.Start, &b.End, &b.State, &b.Total, &b.Started,
		&b.NextDueAt, &b.Error, &b.CreatedAt, &b.UpdatedAt)
}

// InsertBackfill stores a new backfill from p's fields up to NextDueAt. It
// reports false, storing nothing, when the schedule has a backfill of the
// same range.
func (s *Store) InsertBackfill(ctx context.Context, db DBTX, p *Backfill) (bool, error) {
	tag, err := db.Exec(ctx, s.backfills.insert, p.ID, p.Namespace, p.ScheduleID, p.Start, p.End, p.State, p.Total, p.NextDueAt)
	return tag.RowsAffected() == 1, err
}

// GetBackfill reads a backfill of namespace, or, with an empty namespace,
// locks one of any; pgx.ErrNoRows when there is none.
func (s *Store) GetBackfill(ctx context.Context, db DBTX, namespace string, id uuid.UUID) (*Backfill, error) {
	if namespace == "" {
		return firstRow(collectRows(ctx, db, scanBackfill, s.backfills.getForUpdate, id))
	}
	return firstRow(collectRows(ctx, db, scanBackfill, s.backfills.get, id, namespace))
}

// BackfillByRange reads the backfill of p's schedule and range.
func (s *Store) BackfillByRange(ctx context.Context, db DBTX, p *Backfill) (*Backfill, error) {
	return firstRow(collectRows(ctx, db, scanBackfill, s.backfills.byRange, p.Namespace, p.ScheduleID, p.Start, p.End))
}

// ListBackfills reads the backfills of a schedule, newest first.
func (s *Store) ListBackfills(ctx context.Context, db DBTX, p ScheduleKey) ([]*Backfill, error) {
	return collectRows(ctx, db, scanBackfill, s.backfills.list, p.Namespace, p.ID)
}

// SaveBackfill writes a backfill's State, NextDueAt, Started and Error; the
// caller read p locked in the same transaction.
func (s *Store) SaveBackfill(ctx context.Context, db DBTX, p *Backfill) error {
	return exec(ctx, db, s.backfills.save, p.ID, p.State, p.NextDueAt, p.Started, p.Error)
}

// BackfillError records the error of a running backfill's failed batch.
func (s *Store) BackfillError(ctx context.Context, db DBTX, id uuid.UUID, message string) error {
	return exec(ctx, db, s.backfills.fail, id, message)
}
