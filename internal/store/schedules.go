package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/dbschema"
)

// RowLock is how a read locks the row it reads.
type RowLock int

const (
	// NoLock reads without locking.
	NoLock RowLock = iota
	// ForUpdate waits for and takes the row's lock.
	ForUpdate
	// SkipLocked takes the row's lock, or reads nothing when another
	// transaction holds it.
	SkipLocked
)

type scheduleSQL struct {
	get                       [3]string // by RowLock
	list, insert, del, update string
	due, nextDue, lastRunning string
	started, buffer, unbuffer string
	next                      string
}

const scheduleColumns = "namespace, schedule_id, coalesce(cron, ''), coalesce(extract(epoch FROM every) * 1000000, 0)::bigint," +
	" (extract(epoch FROM jitter) * 1000000)::bigint, time_zone, anchor, workflow_kind, workflow_args, queue, overlap_policy," +
	" paused, note, next_run_at, buffered_due_at, last_due_at, last_run_id, coalesce(last_workflow_id, ''), created_at, now()"

func newScheduleSQL(n *dbschema.Names) scheduleSQL {
	one := "SELECT " + scheduleColumns + " FROM " + n.Schedule + " WHERE namespace = $1 AND schedule_id = $2"
	key := " WHERE namespace = $1 AND schedule_id = $2"
	return scheduleSQL{
		get:  [3]string{one, one + " FOR UPDATE", one + " FOR UPDATE SKIP LOCKED"},
		list: "SELECT " + scheduleColumns + " FROM " + n.Schedule + " WHERE namespace = $1 ORDER BY schedule_id",
		insert: "INSERT INTO " + n.Schedule + " (namespace, schedule_id, cron, every, jitter, time_zone, anchor, workflow_kind," +
			" workflow_args, queue, overlap_policy, paused, note, next_run_at) VALUES ($1, $2, nullif($3, '')," +
			" nullif($4::bigint, 0) * interval '1 microsecond', $5::bigint * interval '1 microsecond', $6, $7, $8, $9, $10, $11, $12, $13, $14)" +
			" ON CONFLICT (namespace, schedule_id) DO NOTHING",
		del:    "DELETE FROM " + n.Schedule + key,
		update: "UPDATE " + n.Schedule + " SET note = $3, overlap_policy = $4, paused = $5, next_run_at = $6, updated_at = now()" + key,
		due: "SELECT namespace, schedule_id FROM " + n.Schedule +
			" WHERE NOT paused AND (next_run_at <= now() OR buffered_due_at IS NOT NULL) ORDER BY next_run_at LIMIT 100",
		nextDue: "SELECT min(next_run_at), now() FROM " + n.Schedule + " WHERE NOT paused",
		lastRunning: "SELECT EXISTS (SELECT 1 FROM " + n.Run + " WHERE namespace = $2 AND state = 'running'" +
			" AND workflow_id = (SELECT workflow_id FROM " + n.Run + " WHERE run_id = $1))",
		started:  "UPDATE " + n.Schedule + " SET last_due_at = $3, last_run_id = $4, last_workflow_id = $5, updated_at = now()" + key,
		buffer:   "UPDATE " + n.Schedule + " SET buffered_due_at = coalesce(buffered_due_at, $3)" + key,
		unbuffer: "UPDATE " + n.Schedule + " SET buffered_due_at = NULL" + key,
		next:     "UPDATE " + n.Schedule + " SET next_run_at = $3, updated_at = now()" + key,
	}
}

// Schedule is a weir_schedule row.
type Schedule struct {
	Namespace, ID, Cron string
	Every, Jitter       time.Duration // in microseconds
	TimeZone            string
	Anchor              time.Time
	WorkflowKind        string
	WorkflowArgs        []byte
	Queue               string
	OverlapPolicy       string
	Paused              bool
	Note                string
	NextRunAt           *time.Time
	BufferedDueAt       *time.Time
	LastDueAt           *time.Time
	LastRunID           *uuid.UUID
	LastWorkflowID      string
	CreatedAt           time.Time
	// Now is the database's clock when the row was read.
	Now time.Time
}

func scanSchedule(row pgx.Row) (*Schedule, error) {
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

// GetScheduleParams name the schedule GetSchedule reads and how it locks it.
type GetScheduleParams struct {
	ScheduleKey
	Lock RowLock
}

// GetSchedule reads a schedule; pgx.ErrNoRows when there is none (or, with
// SkipLocked, when another transaction holds it).
func (s *Store) GetSchedule(ctx context.Context, db DBTX, p GetScheduleParams) (*Schedule, error) {
	return scanSchedule(db.QueryRow(ctx, s.schedules.get[p.Lock], p.Namespace, p.ID))
}

// ListSchedules reads a namespace's schedules, by ID.
func (s *Store) ListSchedules(ctx context.Context, db DBTX, namespace string) ([]*Schedule, error) {
	rows, err := db.Query(ctx, s.schedules.list, namespace)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Schedule, error) { return scanSchedule(row) })
}

// InsertSchedule stores a new schedule from p's fields up to NextRunAt (an
// empty Cron or a zero Every is NULL). It reports false, storing nothing,
// when the schedule exists.
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

// UpdateScheduleParams are a schedule's changeable fields.
type UpdateScheduleParams struct {
	ScheduleKey
	Note, OverlapPolicy string
	Paused              bool
	NextRunAt           *time.Time
}

// UpdateSchedule sets a schedule's changeable fields.
func (s *Store) UpdateSchedule(ctx context.Context, db DBTX, p UpdateScheduleParams) error {
	_, err := db.Exec(ctx, s.schedules.update, p.Namespace, p.ID, p.Note, p.OverlapPolicy, p.Paused, p.NextRunAt)
	return err
}

// DueSchedules names up to 100 running schedules with a due or buffered
// start, soonest first.
func (s *Store) DueSchedules(ctx context.Context, db DBTX) ([]ScheduleKey, error) {
	rows, err := db.Query(ctx, s.schedules.due)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (k ScheduleKey, err error) {
		return k, row.Scan(&k.Namespace, &k.ID)
	})
}

// NextDueSchedule returns the soonest due time of a running schedule (nil
// when none) and the database's clock.
func (s *Store) NextDueSchedule(ctx context.Context, db DBTX) (next *time.Time, now time.Time, err error) {
	err = db.QueryRow(ctx, s.schedules.nextDue).Scan(&next, &now)
	return next, now, err
}

// WorkflowRunningParams name a run by ID in a namespace.
type WorkflowRunningParams struct {
	Namespace string
	RunID     uuid.UUID
}

// WorkflowRunning reports whether the workflow of run RunID has a running
// run: that run, or one it continued as.
func (s *Store) WorkflowRunning(ctx context.Context, db DBTX, p WorkflowRunningParams) (running bool, err error) {
	return running, db.QueryRow(ctx, s.schedules.lastRunning, p.RunID, p.Namespace).Scan(&running)
}

// ScheduleStartedParams record the run a schedule started for a due time.
type ScheduleStartedParams struct {
	ScheduleKey
	Due        time.Time
	RunID      uuid.UUID
	WorkflowID string
}

// ScheduleStarted records the run a schedule started last.
func (s *Store) ScheduleStarted(ctx context.Context, db DBTX, p ScheduleStartedParams) error {
	_, err := db.Exec(ctx, s.schedules.started, p.Namespace, p.ID, p.Due, p.RunID, p.WorkflowID)
	return err
}

// ScheduleAtParams name a schedule and a due time.
type ScheduleAtParams struct {
	ScheduleKey
	At time.Time
}

// BufferSchedule keeps At as the schedule's buffered start, unless one is
// buffered already.
func (s *Store) BufferSchedule(ctx context.Context, db DBTX, p ScheduleAtParams) error {
	_, err := db.Exec(ctx, s.schedules.buffer, p.Namespace, p.ID, p.At)
	return err
}

// UnbufferSchedule drops the schedule's buffered start.
func (s *Store) UnbufferSchedule(ctx context.Context, db DBTX, p ScheduleKey) error {
	_, err := db.Exec(ctx, s.schedules.unbuffer, p.Namespace, p.ID)
	return err
}

// SetScheduleNext sets a schedule's next due time to At.
func (s *Store) SetScheduleNext(ctx context.Context, db DBTX, p ScheduleAtParams) error {
	_, err := db.Exec(ctx, s.schedules.next, p.Namespace, p.ID, p.At)
	return err
}
