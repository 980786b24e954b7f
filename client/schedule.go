package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirhq/weir/internal/schedule"
)

// OverlapPolicy says what a schedule does when a start is due while the run
// it started last is still running.
type OverlapPolicy string

const (
	// OverlapSkip skips the start. The default.
	OverlapSkip OverlapPolicy = "skip"
	// OverlapBufferOne starts once the running run closes (one start is
	// kept; more are skipped).
	OverlapBufferOne OverlapPolicy = "buffer_one"
	// OverlapAllowAll starts anyway: runs overlap.
	OverlapAllowAll OverlapPolicy = "allow_all"
)

// ScheduleParams describe a schedule for CreateSchedule.
type ScheduleParams struct {
	// Cron is a five-field cron expression or a descriptor ("@hourly");
	// give Cron or Every.
	Cron string

	// Every is a fixed interval, counted from the schedule's creation.
	Every time.Duration

	// ID names the schedule in the client's namespace. Required.
	ID string

	// Jitter delays each start by up to this much (the same delay for a
	// given due time on every worker). Defaults to 0.
	Jitter time.Duration

	// Note is for people.
	Note string

	// OverlapPolicy applies when a start is due while the last run is still
	// running. Defaults to OverlapSkip.
	OverlapPolicy OverlapPolicy

	// Paused creates the schedule paused.
	Paused bool

	// Queue is the River queue of the started runs' tasks. Defaults to
	// QueueDefault.
	Queue string

	// TimeZone is the IANA zone cron fields are read in. Defaults to UTC.
	TimeZone string

	// Workflow are the args of every run the schedule starts (their Kind()
	// is the workflow type). Required.
	Workflow WorkflowArgs
}

// Schedule is a schedule as stored.
type Schedule struct {
	// Anchor is the instant an Every schedule's due times count from: they
	// are Anchor + n×Every for n ≥ 1.
	Anchor         time.Time
	Cron           string
	CreatedAt      time.Time
	Every          time.Duration
	ID             string
	Jitter         time.Duration
	LastDueAt      *time.Time
	LastRunID      *uuid.UUID
	LastWorkflowID string
	Namespace      string
	// NextRunAt is the next due time; nil when none (a paused schedule keeps
	// it).
	NextRunAt     *time.Time
	Note          string
	OverlapPolicy OverlapPolicy
	Paused        bool
	Queue         string
	TimeZone      string
	WorkflowKind  string
}

// ErrScheduleNotFound is matched (errors.Is) by a *ScheduleNotFoundError.
var ErrScheduleNotFound = errors.New("weir: schedule not found")

// ScheduleNotFoundError names a schedule that does not exist.
type ScheduleNotFoundError struct {
	ID        string
	Namespace string
}

func (e *ScheduleNotFoundError) Error() string {
	return fmt.Sprintf("weir: no schedule %s in namespace %s", e.ID, e.Namespace)
}

// Is makes errors.Is(err, ErrScheduleNotFound) true.
func (e *ScheduleNotFoundError) Is(target error) bool { return target == ErrScheduleNotFound }

// ErrScheduleExists is returned by CreateSchedule when the ID is taken.
var ErrScheduleExists = errors.New("weir: schedule already exists")

// ScheduleWorkflowID is the workflow ID of the run a schedule starts for a
// due time: one per due time, so a due time never starts two runs.
func ScheduleWorkflowID(scheduleID string, due time.Time) string {
	return scheduleID + "/" + due.UTC().Format(time.RFC3339Nano)
}

// CreateSchedule stores a schedule; workers start its runs when they are
// due.
func (c *Client) CreateSchedule(ctx context.Context, p *ScheduleParams) (*Schedule, error) {
	if p == nil || p.ID == "" || len(p.ID) > 255 {
		return nil, errors.New("weir: CreateSchedule needs an ID of 1 to 255 bytes")
	}
	if p.Workflow == nil {
		return nil, errors.New("weir: CreateSchedule needs the workflow args")
	}
	kind := p.Workflow.Kind()
	if err := validateName("workflow kind", kind); err != nil {
		return nil, err
	}
	spec := &schedule.Spec{Cron: p.Cron, Every: p.Every, Jitter: p.Jitter, TimeZone: p.TimeZone}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	policy := p.OverlapPolicy
	if policy == "" {
		policy = OverlapSkip
	}
	if policy != OverlapSkip && policy != OverlapBufferOne && policy != OverlapAllowAll {
		return nil, fmt.Errorf("weir: unknown overlap policy %q", policy)
	}
	args, err := json.Marshal(p.Workflow)
	if err != nil {
		return nil, &PayloadError{Err: err, Op: "encoding"}
	}
	queue := p.Queue
	if queue == "" {
		queue = QueueDefault
	}
	var now time.Time
	if err := c.pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return nil, fmt.Errorf("reading the time: %w", err)
	}
	next, err := spec.Next(now, now)
	if err != nil {
		return nil, err
	}
	var every *string
	if p.Every > 0 {
		e := fmt.Sprintf("%d microseconds", p.Every.Microseconds())
		every = &e
	}
	var cron *string
	if p.Cron != "" {
		cron = &p.Cron
	}
	_, err = c.pool.Exec(ctx, "INSERT INTO "+c.names.Schedule+
		" (namespace, schedule_id, cron, every, jitter, time_zone, anchor, workflow_kind, workflow_args, queue, overlap_policy, paused, note, next_run_at)"+
		" VALUES ($1, $2, $3, $4::interval, $5::bigint * interval '1 microsecond', $6, $7, $8, $9, $10, $11, $12, $13, $14)",
		c.config.Namespace, p.ID, cron, every, p.Jitter.Microseconds(), spec.TimeZoneOrUTC(), now, kind, args, queue, string(policy), p.Paused, p.Note, next)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return nil, fmt.Errorf("%w: %s", ErrScheduleExists, p.ID)
	}
	if err != nil {
		return nil, fmt.Errorf("creating schedule %s: %w", p.ID, err)
	}
	return c.DescribeSchedule(ctx, p.ID)
}

const scheduleColumns = "schedule_id, namespace, coalesce(cron, ''), coalesce(extract(epoch FROM every) * 1000000, 0)::bigint," +
	" (extract(epoch FROM jitter) * 1000000)::bigint, time_zone, workflow_kind, queue, overlap_policy, paused, note," +
	" next_run_at, last_due_at, last_run_id, coalesce(last_workflow_id, ''), created_at, anchor"

func scanSchedule(row pgx.Row) (*Schedule, error) {
	var (
		s             Schedule
		every, jitter int64
		policy        string
	)
	err := row.Scan(&s.ID, &s.Namespace, &s.Cron, &every, &jitter, &s.TimeZone, &s.WorkflowKind, &s.Queue, &policy,
		&s.Paused, &s.Note, &s.NextRunAt, &s.LastDueAt, &s.LastRunID, &s.LastWorkflowID, &s.CreatedAt, &s.Anchor)
	s.Every, s.Jitter, s.OverlapPolicy = time.Duration(every)*time.Microsecond, time.Duration(jitter)*time.Microsecond, OverlapPolicy(policy)
	return &s, err
}

// DescribeSchedule returns a schedule.
func (c *Client) DescribeSchedule(ctx context.Context, id string) (*Schedule, error) {
	s, err := scanSchedule(c.pool.QueryRow(ctx, "SELECT "+scheduleColumns+" FROM "+c.names.Schedule+
		" WHERE namespace = $1 AND schedule_id = $2", c.config.Namespace, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &ScheduleNotFoundError{ID: id, Namespace: c.config.Namespace}
	}
	if err != nil {
		return nil, fmt.Errorf("reading schedule %s: %w", id, err)
	}
	return s, nil
}

// ListSchedules returns the namespace's schedules, by ID.
func (c *Client) ListSchedules(ctx context.Context) ([]*Schedule, error) {
	rows, err := c.pool.Query(ctx, "SELECT "+scheduleColumns+" FROM "+c.names.Schedule+
		" WHERE namespace = $1 ORDER BY schedule_id", c.config.Namespace)
	if err != nil {
		return nil, fmt.Errorf("listing schedules: %w", err)
	}
	defer rows.Close()
	var out []*Schedule
	for rows.Next() {
		s, err := scanSchedule(rows)
		if err != nil {
			return nil, fmt.Errorf("listing schedules: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// DeleteSchedule deletes a schedule; runs it started go on.
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	tag, err := c.pool.Exec(ctx, "DELETE FROM "+c.names.Schedule+" WHERE namespace = $1 AND schedule_id = $2", c.config.Namespace, id)
	if err != nil {
		return fmt.Errorf("deleting schedule %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return &ScheduleNotFoundError{ID: id, Namespace: c.config.Namespace}
	}
	return nil
}

// ScheduleUpdate changes a schedule; nil fields stay as they are.
type ScheduleUpdate struct {
	Note          *string
	OverlapPolicy *OverlapPolicy
	// Paused pauses (true) or resumes (false) the schedule. Resuming skips
	// the due times that passed meanwhile (Backfill starts them).
	Paused *bool
}

// UpdateSchedule is UpdateScheduleTx in a transaction of its own.
func (c *Client) UpdateSchedule(ctx context.Context, id string, u *ScheduleUpdate) (*Schedule, error) {
	var s *Schedule
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) (err error) {
		s, err = c.UpdateScheduleTx(ctx, tx, id, u)
		return err
	})
	return s, err
}

// UpdateScheduleTx changes a schedule in tx and returns it as changed. A
// nil u changes nothing.
func (c *Client) UpdateScheduleTx(ctx context.Context, tx pgx.Tx, id string, u *ScheduleUpdate) (*Schedule, error) {
	current, err := scanSchedule(tx.QueryRow(ctx, "SELECT "+scheduleColumns+" FROM "+c.names.Schedule+
		" WHERE namespace = $1 AND schedule_id = $2 FOR UPDATE", c.config.Namespace, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &ScheduleNotFoundError{ID: id, Namespace: c.config.Namespace}
	}
	if err != nil {
		return nil, fmt.Errorf("reading schedule %s: %w", id, err)
	}
	if u == nil {
		return current, nil
	}
	if u.Note != nil {
		current.Note = *u.Note
	}
	if u.OverlapPolicy != nil {
		current.OverlapPolicy = *u.OverlapPolicy
	}
	if u.Paused != nil {
		if current.Paused && !*u.Paused {
			// Resuming: the next due time from now on.
			var now time.Time
			if err := tx.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
				return nil, fmt.Errorf("reading the time: %w", err)
			}
			spec := &schedule.Spec{Cron: current.Cron, Every: current.Every, Jitter: current.Jitter, TimeZone: current.TimeZone}
			next, err := spec.Next(current.Anchor, now)
			if err != nil {
				return nil, err
			}
			current.NextRunAt = &next
		}
		current.Paused = *u.Paused
	}
	if _, err := tx.Exec(ctx, "UPDATE "+c.names.Schedule+" SET note = $3, overlap_policy = $4, paused = $5, next_run_at = $6, updated_at = now()"+
		" WHERE namespace = $1 AND schedule_id = $2", c.config.Namespace, id, current.Note, string(current.OverlapPolicy), current.Paused, current.NextRunAt); err != nil {
		return nil, fmt.Errorf("updating schedule %s: %w", id, err)
	}
	return current, nil
}

// PauseSchedule is PauseScheduleTx in a transaction of its own.
func (c *Client) PauseSchedule(ctx context.Context, id string) (*Schedule, error) {
	return c.UpdateSchedule(ctx, id, &ScheduleUpdate{Paused: new(true)})
}

// PauseScheduleTx pauses a schedule in tx: it starts no run until resumed
// (TriggerSchedule and BackfillSchedule still start runs). Pausing a paused
// schedule changes nothing.
func (c *Client) PauseScheduleTx(ctx context.Context, tx pgx.Tx, id string) (*Schedule, error) {
	return c.UpdateScheduleTx(ctx, tx, id, &ScheduleUpdate{Paused: new(true)})
}

// ResumeSchedule is ResumeScheduleTx in a transaction of its own.
func (c *Client) ResumeSchedule(ctx context.Context, id string) (*Schedule, error) {
	return c.UpdateSchedule(ctx, id, &ScheduleUpdate{Paused: new(false)})
}

// ResumeScheduleTx resumes a paused schedule in tx. Its next start is its
// first due time after now: due times that passed while it was paused are
// skipped (BackfillSchedule starts them). Resuming a running schedule
// changes nothing.
func (c *Client) ResumeScheduleTx(ctx context.Context, tx pgx.Tx, id string) (*Schedule, error) {
	return c.UpdateScheduleTx(ctx, tx, id, &ScheduleUpdate{Paused: new(false)})
}

// TriggerSchedule starts the schedule's workflow now, outside its due times
// and whatever its overlap policy.
func (c *Client) TriggerSchedule(ctx context.Context, id string) (*Run, error) {
	s, err := c.DescribeSchedule(ctx, id)
	if err != nil {
		return nil, err
	}
	var args json.RawMessage
	if err := c.pool.QueryRow(ctx, "SELECT workflow_args FROM "+c.names.Schedule+" WHERE namespace = $1 AND schedule_id = $2",
		c.config.Namespace, id).Scan(&args); err != nil {
		return nil, fmt.Errorf("reading schedule %s: %w", id, err)
	}
	return c.Start(ctx, RawArgs{JSON: args, KindName: s.WorkflowKind}, &StartOpts{
		Queue: s.Queue, WorkflowID: id + "/manual-" + uuid.NewString(),
	})
}

// BackfillSchedule starts the runs of the due times in [from, to), as if the
// schedule had run then (overlapping), and returns them. Each due time starts
// at most one run, however often it is backfilled. It starts them all before
// it returns, up to 10000; for a longer range, or one that should not depend
// on the caller staying up, CreateBackfill hands the range to the workers.
func (c *Client) BackfillSchedule(ctx context.Context, id string, from, to time.Time) ([]*Run, error) {
	s, err := c.DescribeSchedule(ctx, id)
	if err != nil {
		return nil, err
	}
	var (
		args   json.RawMessage
		anchor time.Time
	)
	if err := c.pool.QueryRow(ctx, "SELECT workflow_args, anchor FROM "+c.names.Schedule+" WHERE namespace = $1 AND schedule_id = $2",
		c.config.Namespace, id).Scan(&args, &anchor); err != nil {
		return nil, fmt.Errorf("reading schedule %s: %w", id, err)
	}
	spec := &schedule.Spec{Cron: s.Cron, Every: s.Every, TimeZone: s.TimeZone}
	var runs []*Run
	due, err := spec.Next(anchor, from.Add(-time.Nanosecond))
	for ; err == nil && due.Before(to); due, err = spec.Next(anchor, due) {
		if len(runs) >= 10000 {
			return runs, errors.New("weir: backfill covers more than 10000 due times; split the range")
		}
		run, err := c.Start(ctx, RawArgs{JSON: args, KindName: s.WorkflowKind}, &StartOpts{
			Queue: s.Queue, RequestID: ScheduleRequestID(id, due), WorkflowID: ScheduleWorkflowID(id, due),
		})
		if err != nil {
			return runs, err
		}
		runs = append(runs, run)
	}
	if errors.Is(err, schedule.ErrNeverDue) {
		return runs, nil // no due time left in the range
	}
	return runs, err
}

// ScheduleRequestID is the request ID of the start of a schedule's due time.
func ScheduleRequestID(scheduleID string, due time.Time) string {
	return "schedule:" + ScheduleWorkflowID(scheduleID, due)
}
