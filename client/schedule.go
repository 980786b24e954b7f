package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/schedule"
	"github.com/weirhq/weir/internal/store"
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

// CreateSchedule is CreateScheduleTx in a transaction of its own.
func (c *Client) CreateSchedule(ctx context.Context, p *ScheduleParams) (*Schedule, error) {
	return inTx(ctx, c, func(tx pgx.Tx) (*Schedule, error) { return c.CreateScheduleTx(ctx, tx, p) })
}

// CreateScheduleTx stores a schedule in tx; once tx commits, workers start
// its runs when they are due. An ID taken in the namespace is
// ErrScheduleExists, and leaves tx usable.
func (c *Client) CreateScheduleTx(ctx context.Context, tx pgx.Tx, p *ScheduleParams) (*Schedule, error) {
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
	policy := cmp.Or(p.OverlapPolicy, OverlapSkip)
	if policy != OverlapSkip && policy != OverlapBufferOne && policy != OverlapAllowAll {
		return nil, fmt.Errorf("weir: unknown overlap policy %q", policy)
	}
	args, err := json.Marshal(p.Workflow)
	if err != nil {
		return nil, &PayloadError{Err: err, Op: "encoding"}
	}
	now, err := c.store.Now(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("reading the time: %w", err)
	}
	next, err := spec.Next(now, now)
	if err != nil {
		return nil, err
	}
	created, err := c.store.InsertSchedule(ctx, tx, &store.Schedule{
		ScheduleKey: c.scheduleKey(p.ID), Cron: p.Cron, Every: p.Every, Jitter: p.Jitter, TimeZone: spec.TimeZoneOrUTC(),
		Anchor: now, WorkflowKind: kind, WorkflowArgs: args, Queue: cmp.Or(p.Queue, QueueDefault), OverlapPolicy: string(policy),
		Paused: p.Paused, Note: p.Note, NextRunAt: &next,
	})
	if err != nil {
		return nil, fmt.Errorf("creating schedule %s: %w", p.ID, err)
	}
	if !created {
		return nil, fmt.Errorf("%w: %s", ErrScheduleExists, p.ID)
	}
	return newSchedule(c.getSchedule(ctx, tx, p.ID, store.NoLock))
}

// getSchedule reads a schedule of the client's namespace.
func (c *Client) getSchedule(ctx context.Context, db store.DBTX, id string, lock store.RowLock) (*store.Schedule, error) {
	row, err := c.store.GetSchedule(ctx, db, c.scheduleKey(id), lock)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &ScheduleNotFoundError{ID: id, Namespace: c.config.Namespace}
	}
	if err != nil {
		return nil, fmt.Errorf("reading schedule %s: %w", id, err)
	}
	return row, nil
}

func (c *Client) scheduleKey(id string) store.ScheduleKey {
	return store.ScheduleKey{Namespace: c.config.Namespace, ID: id}
}

// newSchedule is the schedule of a row read with err.
func newSchedule(r *store.Schedule, err error) (*Schedule, error) {
	if err != nil {
		return nil, err
	}
	return &Schedule{
		Anchor: r.Anchor, Cron: r.Cron, CreatedAt: r.CreatedAt, Every: r.Every, ID: r.ID, Jitter: r.Jitter,
		LastDueAt: r.LastDueAt, LastRunID: r.LastRunID, LastWorkflowID: r.LastWorkflowID, Namespace: r.Namespace,
		NextRunAt: r.NextRunAt, Note: r.Note, OverlapPolicy: OverlapPolicy(r.OverlapPolicy), Paused: r.Paused,
		Queue: r.Queue, TimeZone: r.TimeZone, WorkflowKind: r.WorkflowKind,
	}, nil
}

// DescribeSchedule returns a schedule.
func (c *Client) DescribeSchedule(ctx context.Context, id string) (*Schedule, error) {
	return newSchedule(c.getSchedule(ctx, c.pool, id, store.NoLock))
}

// ListSchedules returns the namespace's schedules, by ID.
func (c *Client) ListSchedules(ctx context.Context) ([]*Schedule, error) {
	rows, err := c.store.ListSchedules(ctx, c.pool, c.config.Namespace)
	if err != nil {
		return nil, fmt.Errorf("listing schedules: %w", err)
	}
	var out []*Schedule
	for _, r := range rows {
		s, _ := newSchedule(r, nil)
		out = append(out, s)
	}
	return out, nil
}

// DeleteSchedule is DeleteScheduleTx in a transaction of its own.
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	return c.inTxErr(ctx, func(tx pgx.Tx) error { return c.DeleteScheduleTx(ctx, tx, id) })
}

// DeleteScheduleTx deletes a schedule in tx; runs it started go on.
func (c *Client) DeleteScheduleTx(ctx context.Context, tx pgx.Tx, id string) error {
	deleted, err := c.store.DeleteSchedule(ctx, tx, c.scheduleKey(id))
	if err != nil {
		return fmt.Errorf("deleting schedule %s: %w", id, err)
	}
	if !deleted {
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
	return inTx(ctx, c, func(tx pgx.Tx) (*Schedule, error) { return c.UpdateScheduleTx(ctx, tx, id, u) })
}

// UpdateScheduleTx changes a schedule in tx and returns it as changed. A
// nil u changes nothing.
func (c *Client) UpdateScheduleTx(ctx context.Context, tx pgx.Tx, id string, u *ScheduleUpdate) (*Schedule, error) {
	row, err := c.getSchedule(ctx, tx, id, store.ForUpdate)
	if err != nil || u == nil {
		return newSchedule(row, err)
	}
	if u.Note != nil {
		row.Note = *u.Note
	}
	if u.OverlapPolicy != nil {
		row.OverlapPolicy = string(*u.OverlapPolicy)
	}
	if u.Paused != nil {
		if row.Paused && !*u.Paused {
			// Resuming: the next due time from now on.
			spec := &schedule.Spec{Cron: row.Cron, Every: row.Every, Jitter: row.Jitter, TimeZone: row.TimeZone}
			next, err := spec.Next(row.Anchor, row.Now)
			if err != nil {
				return nil, err
			}
			row.NextRunAt = &next
		}
		row.Paused = *u.Paused
	}
	if err := c.store.SaveSchedule(ctx, tx, row); err != nil {
		return nil, fmt.Errorf("updating schedule %s: %w", id, err)
	}
	return newSchedule(row, nil)
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
	s, err := c.getSchedule(ctx, c.pool, id, store.NoLock)
	if err != nil {
		return nil, err
	}
	return c.Start(ctx, scheduledArgs(s), &StartOpts{Queue: s.Queue, WorkflowID: id + "/manual-" + uuid.NewString()})
}

// TriggerScheduleTx is TriggerSchedule in tx: the run starts if tx commits.
func (c *Client) TriggerScheduleTx(ctx context.Context, tx pgx.Tx, id string) (*Run, error) {
	s, err := c.getSchedule(ctx, tx, id, store.NoLock)
	if err != nil {
		return nil, err
	}
	return c.StartTx(ctx, tx, scheduledArgs(s), &StartOpts{Queue: s.Queue, WorkflowID: id + "/manual-" + uuid.NewString()})
}

// scheduledArgs are the args of the runs a schedule starts.
func scheduledArgs(s *store.Schedule) RawArgs {
	return RawArgs{JSON: s.WorkflowArgs, KindName: s.WorkflowKind}
}

// BackfillSchedule starts the runs of the due times in [from, to), as if the
// schedule had run then (overlapping), and returns them. Each due time starts
// at most one run, however often it is backfilled. It starts them all before
// it returns, up to 10000; for a longer range, or one that should not depend
// on the caller staying up, CreateBackfill hands the range to the workers.
func (c *Client) BackfillSchedule(ctx context.Context, id string, from, to time.Time) ([]*Run, error) {
	return c.backfillSchedule(ctx, c.pool, id, from, to, c.Start)
}

// BackfillScheduleTx is BackfillSchedule in tx: the runs start if tx
// commits, all of them or none.
func (c *Client) BackfillScheduleTx(ctx context.Context, tx pgx.Tx, id string, from, to time.Time) ([]*Run, error) {
	return c.backfillSchedule(ctx, tx, id, from, to, func(ctx context.Context, args WorkflowArgs, opts *StartOpts) (*Run, error) {
		return c.StartTx(ctx, tx, args, opts)
	})
}

func (c *Client) backfillSchedule(ctx context.Context, db store.DBTX, id string, from, to time.Time,
	start func(ctx context.Context, args WorkflowArgs, opts *StartOpts) (*Run, error),
) ([]*Run, error) {
	s, err := c.getSchedule(ctx, db, id, store.NoLock)
	if err != nil {
		return nil, err
	}
	spec := &schedule.Spec{Cron: s.Cron, Every: s.Every, TimeZone: s.TimeZone}
	var runs []*Run
	due, err := spec.Next(s.Anchor, from.Add(-time.Nanosecond))
	for ; err == nil && due.Before(to); due, err = spec.Next(s.Anchor, due) {
		if len(runs) >= 10000 {
			return runs, errors.New("weir: backfill covers more than 10000 due times; split the range")
		}
		run, err := start(ctx, scheduledArgs(s), &StartOpts{
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
