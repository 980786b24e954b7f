package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/dbschema"
)

// RowLock is how a read locks the row it reads: not at all, waiting for
// the lock, or skipping a row another transaction holds.
type RowLock int

// The row locks.
const (
	NoLock RowLock = iota
	ForUpdate
	SkipLocked
)

type scheduleSQL struct {
	get                       [3]string // by RowLock
	list, insert, del, save   string
	due, nextDue, lastRunning string
}

func newScheduleSQL(n *dbschema.Names) scheduleSQL {
	const columns = "namespace, schedule_id, coalesce(cron, ''), coalesce(extract(epoch FROM every) * 1000000, 0)::bigint," +
		" (extract(epoch FROM jitter) * 1000000)::bigint, time_zone, anchor, workflow_kind, workflow_args, queue, overlap_policy," +
		" paused, note, next_run_at, buffered_due_at, last_due_at, last_run_id, coalesce(last_workflow_id, ''), created_at, now()"
	one := "SELECT " + columns + " FROM " + n.Schedule + " WHERE namespace = $1 AND schedule_id = $2"
	return scheduleSQL{
		get:  [3]string{one, one + " FOR UPDATE", one + " FOR UPDATE SKIP LOCKED"},
		list: "SELECT " + columns + " FROM " + n.Schedule + " WHERE namespace = $1 ORDER BY schedule_id",
		insert: "INSERT INTO " + n.Schedule + " (namespace, schedule_id, cron, every, jitter, time_zone, anchor, workflow_kind," +
			" workflow_args, queue, overlap_policy, paused, note, next_run_at) VALUES ($1, $2, nullif($3, '')," +
			" nullif($4::bigint, 0) * interval '1 microsecond', $5::bigint * interval '1 microsecond', $6, $7, $8, $9, $10, $11, $12, $13, $14)" +
			" ON CONFLICT (namespace, schedule_id) DO NOTHING",
		del: "DELETE FROM " + n.Schedule + " WHERE namespace = $1 AND schedule_id = $2",
		save: "UPDATE " + n.Schedule + " SET overlap_policy = $3, paused = $4, note = $5, next_run_at = $6, buffered_due_at = $7," +
			" last_due_at = $8, last_run_id = $9, last_workflow_id = nullif($10, ''), updated_at = now()" +
			" WHERE namespace = $1 AND schedule_id = $2",
		due: "SELECT namespace, schedule_id FROM " + n.Schedule +
			" WHERE NOT paused AND (next_run_at <= now() OR buffered_due_at IS NOT NULL) ORDER BY next_run_at LIMIT 100",
		nextDue: "SELECT min(next_run_at), now() FROM " + n.Schedule + " WHERE NOT paused",
		lastRunning: "SELECT EXISTS (SELECT 1 FROM " + n.Run + " WHERE namespace = $2 AND state = 'running'" +
			" AND workflow_id = (SELECT workflow_id FROM " + n.Run + " WHERE run_id = $1))",
	}
}

// Schedule is a weir_schedule row; Now is the database's clock when it
// was read.
type Schedule struct {
	ScheduleKey
	Cron, TimeZone                     string
	Every, Jitter                      time.Duration // in microseconds
	Anchor, CreatedAt, Now             time.Time
	WorkflowKind, Queue, OverlapPolicy string
	WorkflowArgs                       []byte
	Paused                             bool
	Note, LastWorkflowID               string
	NextRunAt, BufferedDueAt           *time.Time
	LastDueAt                          *time.Time
	LastRunID                          *uuid.UUID
}

func scanSchedule(row pgx.CollectableRow) (*Schedule, error) {
	var (
		s             Schedule
		every, jitter int64
	)
	err := row.Scan(&s.Namespace, &s.ID, &s.Cron, &every, &jitter, &s.TimeZone, &s.Anchor, &s.WorkflowKind, &s.WorkflowArgs,
		&s.Queue, &s.OverlapPolicy, &s.Paused, &s.Note, &s.NextRunAt, &s.BufferedDueAt, &s.LastDueAt, &s.LastRunID,
		&s.LastWorkflowID, &s.CreatedAt, &s.Now)
	s.Every, s.Jitter = time.Duration(every)*time.Microsecond, time.Duration(jitter)*time.Microsecond
	return &s, err
}

// ScheduleKey names a schedule.
type ScheduleKey struct {
	Namespace, ID string
}

// GetSchedule reads a schedule; pgx.ErrNoRows when there is none (or, with
// SkipLocked, when another transaction holds it).
func (s *Store) GetSchedule(ctx context.Context, db DBTX, p ScheduleKey, lock RowLock) (*Schedule, error) {
	return firstRow(collectRows(ctx, db, scanSchedule, s.schedules.get[lock], p.Namespace, p.ID))
}

// ListSchedules reads a namespace's schedules, by ID.
func (s *Store) ListSchedules(ctx context.Context, db DBTX, namespace string) ([]*Schedule, error) {
	return collectRows(ctx, db, scanSchedule, s.schedules.list, namespace)
}

// InsertSchedule stores a new schedule from p (an empty Cron or a zero
// Every is NULL; the last start and buffer are not stored). It reports
// false, storing nothing, when the schedule exists.
func (s *Store) InsertSchedule(ctx context.Context, db DBTX, p *Schedule) (bool, error) {
	tag, err := db.Exec(ctx, s.schedules.insert, p.Namespace, p.ID, p.Cron, p.Every.Microseconds(), p.Jitter.Microseconds(),
		p.TimeZone, p.Anchor, p.WorkflowKind, p.WorkflowArgs, p.Queue, p.OverlapPolicy, p.Paused, p.Note, p.NextRunAt)
	return tag.RowsAffected() == 1, err
}

// DeleteSchedule deletes a schedule and reports whether it existed.
func (s *Store) DeleteSchedule(ctx context.Context, db DBTX, p ScheduleKey) (bool, error) {
	tag, err := db.Exec(ctx, s.schedules.del, p.Namespace, p.ID)
	return tag.RowsAffected() == 1, err
}

// SaveSchedule writes a schedule's changeable fields (its policy, pause,
// note, due times and last start) as p has them; the caller read p
// locked in the same transaction.
func (s *Store) SaveSchedule(ctx context.Context, db DBTX, p *Schedule) error {
	return exec(ctx, db, s.schedules.save, p.Namespace, p.ID, p.OverlapPolicy, p.Paused, p.Note, p.NextRunAt, p.BufferedDueAt,
		p.LastDueAt, p.LastRunID, p.LastWorkflowID)
}

// DueSchedules names up to 100 running schedules with a due or buffered
// start, soonest first.
func (s *Store) DueSchedules(ctx context.Context, db DBTX) ([]ScheduleKey, error) {
	return collectRows(ctx, db, pgx.RowToStructByPos[ScheduleKey], s.schedules.due)
}

// NextDueSchedule returns the soonest due time of a running schedule (nil
// when none) and the database's clock.
func (s *Store) NextDueSchedule(ctx context.Context, db DBTX) (next *time.Time, now time.Time, err error) {
	return next, now, db.QueryRow(ctx, s.schedules.nextDue).Scan(&next, &now)
}

// WorkflowRunning reports whether the workflow of run runID has a running
// run in namespace: that run, or one it continued as.
func (s *Store) WorkflowRunning(ctx context.Context, db DBTX, namespace string, runID uuid.UUID) (running bool, err error) {
	return running, db.QueryRow(ctx, s.schedules.lastRunning, runID, namespace).Scan(&running)
}
