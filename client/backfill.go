package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/weirhq/weir/internal/schedule"
	"github.com/weirhq/weir/internal/store"
)

// BackfillMax is the most due times one backfill covers. A longer range is
// refused with a *BackfillTooLargeError: split it.
const BackfillMax = 1_000_000

// BackfillKind is the River job kind of durable backfills. Every weir worker
// serves it, on the queue of the backfilled schedule.
const BackfillKind = "weir.schedule_backfill"

// BackfillState is where a durable backfill stands.
type BackfillState string

const (
	// BackfillRunning: due times are left to start.
	BackfillRunning BackfillState = "running"
	// BackfillCompleted: every due time of the range has started its run.
	BackfillCompleted BackfillState = "completed"
	// BackfillFailed: the backfill stopped for good (its schedule was
	// deleted); Error says why.
	BackfillFailed BackfillState = "failed"
)

// Backfill is a durable backfill of a schedule's due times in [Start, End).
type Backfill struct {
	CreatedAt time.Time
	// End is the range's end (exclusive), Start its start (inclusive), both
	// as stored (microseconds).
	End time.Time
	// Error says why a failed backfill stopped; empty otherwise.
	Error     string
	ID        uuid.UUID
	Namespace string
	// NextDueAt is the next due time to start; nil once none is left.
	NextDueAt  *time.Time
	ScheduleID string
	Start      time.Time
	// Started counts the due times whose runs have started (or had started
	// before this backfill: each due time starts at most one run).
	Started int64
	State   BackfillState
	// Total is how many due times the range holds.
	Total     int64
	UpdatedAt time.Time
}

// ErrBackfillTooLarge is matched (errors.Is) by a *BackfillTooLargeError.
var ErrBackfillTooLarge = errors.New("weir: backfill range too large")

// BackfillTooLargeError refuses a backfill range holding more than Max due
// times; nothing was started or stored.
type BackfillTooLargeError struct {
	End        time.Time
	Max        int64
	ScheduleID string
	Start      time.Time
}

func (e *BackfillTooLargeError) Error() string {
	return fmt.Sprintf("weir: backfill of schedule %s from %s to %s holds more than %d due times: split the range",
		e.ScheduleID, e.Start.UTC().Format(time.RFC3339Nano), e.End.UTC().Format(time.RFC3339Nano), e.Max)
}

// Is makes errors.Is(err, ErrBackfillTooLarge) true.
func (e *BackfillTooLargeError) Is(target error) bool { return target == ErrBackfillTooLarge }

// ErrBackfillNotFound is matched (errors.Is) by a *BackfillNotFoundError.
var ErrBackfillNotFound = errors.New("weir: backfill not found")

// BackfillNotFoundError names a backfill that does not exist in the
// namespace.
type BackfillNotFoundError struct {
	ID        uuid.UUID
	Namespace string
}

func (e *BackfillNotFoundError) Error() string {
	return fmt.Sprintf("weir: no backfill %s in namespace %s", e.ID, e.Namespace)
}

// Is makes errors.Is(err, ErrBackfillNotFound) true.
func (e *BackfillNotFoundError) Is(target error) bool { return target == ErrBackfillNotFound }

// BackfillArgs are the args of a durable backfill's River job.
type BackfillArgs struct {
	BackfillID uuid.UUID `json:"backfill_id"`
}

// Kind implements river.JobArgs.
func (BackfillArgs) Kind() string { return BackfillKind }

// CreateBackfill is CreateBackfillTx in a transaction of its own.
func (c *Client) CreateBackfill(ctx context.Context, scheduleID string, from, to time.Time) (*Backfill, error) {
	return inTx(ctx, c, func(tx pgx.Tx) (*Backfill, error) { return c.CreateBackfillTx(ctx, tx, scheduleID, from, to) })
}

// CreateBackfillTx stores, in tx, a durable backfill of the schedule's due
// times in [from, to) (times count in microseconds): once tx commits, weir's
// workers start the runs in batches, as BackfillSchedule would, and record
// their progress (DescribeBackfill). The range may hold up to BackfillMax
// due times; more is a *BackfillTooLargeError. The same schedule and range
// return the backfill created first, whatever its state: a due time starts
// at most one run however often it is backfilled.
func (c *Client) CreateBackfillTx(ctx context.Context, tx pgx.Tx, scheduleID string, from, to time.Time) (*Backfill, error) {
	from, to = from.Truncate(time.Microsecond), to.Truncate(time.Microsecond)
	if !from.Before(to) {
		return nil, fmt.Errorf("weir: backfill of schedule %s needs a start before its end", scheduleID)
	}
	s, err := c.getSchedule(ctx, tx, scheduleID, store.NoLock)
	if err != nil {
		return nil, err
	}
	spec := &schedule.Spec{Cron: s.Cron, Every: s.Every, TimeZone: s.TimeZone}
	total, err := spec.Count(s.Anchor, from, to, BackfillMax)
	if err != nil {
		return nil, err
	}
	if total > BackfillMax {
		return nil, &BackfillTooLargeError{End: to, Max: BackfillMax, ScheduleID: scheduleID, Start: from}
	}
	row := &store.Backfill{
		ID: uuid.New(), Namespace: c.config.Namespace, ScheduleID: scheduleID, Start: from, End: to,
		State: string(BackfillCompleted), Total: total,
	}
	if total > 0 {
		due, err := spec.NextBefore(s.Anchor, from.Add(-time.Nanosecond), to)
		if err != nil {
			return nil, err
		}
		row.NextDueAt, row.State = &due, string(BackfillRunning)
	}
	inserted, err := c.store.InsertBackfill(ctx, tx, row)
	if err != nil {
		return nil, fmt.Errorf("creating a backfill of schedule %s: %w", scheduleID, err)
	}
	if !inserted { // created before
		if row, err = c.store.BackfillByRange(ctx, tx, row); err != nil {
			return nil, fmt.Errorf("reading the backfill of schedule %s: %w", scheduleID, err)
		}
		return newBackfill(row), nil
	}
	if row.State == string(BackfillRunning) {
		if _, err := c.jobsOn(tx).InsertTx(ctx, tx, BackfillArgs{BackfillID: row.ID}, &river.InsertOpts{Queue: s.Queue}); err != nil {
			return nil, fmt.Errorf("queuing the backfill of schedule %s: %w", scheduleID, err)
		}
	}
	return c.describeBackfill(ctx, tx, row.ID)
}

func newBackfill(r *store.Backfill) *Backfill {
	return &Backfill{
		CreatedAt: r.CreatedAt, End: r.End, Error: r.Error, ID: r.ID, Namespace: r.Namespace, NextDueAt: r.NextDueAt,
		ScheduleID: r.ScheduleID, Start: r.Start, Started: r.Started, State: BackfillState(r.State), Total: r.Total, UpdatedAt: r.UpdatedAt,
	}
}

func (c *Client) describeBackfill(ctx context.Context, db store.DBTX, id uuid.UUID) (*Backfill, error) {
	b, err := c.store.GetBackfill(ctx, db, c.config.Namespace, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &BackfillNotFoundError{ID: id, Namespace: c.config.Namespace}
	}
	if err != nil {
		return nil, fmt.Errorf("reading backfill %s: %w", id, err)
	}
	return newBackfill(b), nil
}

// DescribeBackfill returns a durable backfill as its progress stands.
func (c *Client) DescribeBackfill(ctx context.Context, id uuid.UUID) (*Backfill, error) {
	return c.describeBackfill(ctx, c.pool, id)
}

// ListBackfills returns the durable backfills of a schedule, newest first
// (none for a schedule that has none or does not exist).
func (c *Client) ListBackfills(ctx context.Context, scheduleID string) ([]*Backfill, error) {
	rows, err := c.store.ListBackfills(ctx, c.pool, c.scheduleKey(scheduleID))
	if err != nil {
		return nil, fmt.Errorf("listing backfills: %w", err)
	}
	out := make([]*Backfill, len(rows))
	for i, r := range rows {
		out[i] = newBackfill(r)
	}
	return out, nil
}
