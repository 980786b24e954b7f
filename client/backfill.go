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
	var b *Backfill
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) (err error) {
		b, err = c.CreateBackfillTx(ctx, tx, scheduleID, from, to)
		return err
	})
	return b, err
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
	var (
		cron, timeZone string
		every          int64
		anchor         time.Time
	)
	err := tx.QueryRow(ctx, "SELECT coalesce(cron, ''), coalesce(extract(epoch FROM every) * 1000000, 0)::bigint, time_zone, anchor FROM "+
		c.names.Schedule+" WHERE namespace = $1 AND schedule_id = $2", c.config.Namespace, scheduleID).Scan(&cron, &every, &timeZone, &anchor)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &ScheduleNotFoundError{ID: scheduleID, Namespace: c.config.Namespace}
	}
	if err != nil {
		return nil, fmt.Errorf("reading schedule %s: %w", scheduleID, err)
	}
	spec := &schedule.Spec{Cron: cron, Every: time.Duration(every) * time.Microsecond, TimeZone: timeZone}
	total, err := spec.Count(anchor, from, to, BackfillMax)
	if err != nil {
		return nil, err
	}
	if total > BackfillMax {
		return nil, &BackfillTooLargeError{End: to, Max: BackfillMax, ScheduleID: scheduleID, Start: from}
	}
	var next *time.Time
	if total > 0 {
		due, err := spec.NextBefore(anchor, from.Add(-time.Nanosecond), to)
		if err != nil {
			return nil, err
		}
		next = &due
	}
	state := BackfillRunning
	if total == 0 {
		state = BackfillCompleted
	}
	id := uuid.New()
	var inserted bool
	err = tx.QueryRow(ctx, "INSERT INTO "+c.names.Backfill+" (backfill_id, namespace, schedule_id, range_start, range_end, state, total, next_due_at)"+
		" VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (namespace, schedule_id, range_start, range_end) DO NOTHING RETURNING true",
		id, c.config.Namespace, scheduleID, from, to, string(state), total, next).Scan(&inserted)
	if errors.Is(err, pgx.ErrNoRows) {
		return c.backfillByRange(ctx, tx, scheduleID, from, to) // created before
	}
	if err != nil {
		return nil, fmt.Errorf("creating a backfill of schedule %s: %w", scheduleID, err)
	}
	if state == BackfillRunning {
		var queue string
		if err := tx.QueryRow(ctx, "SELECT queue FROM "+c.names.Schedule+" WHERE namespace = $1 AND schedule_id = $2",
			c.config.Namespace, scheduleID).Scan(&queue); err != nil {
			return nil, fmt.Errorf("reading schedule %s: %w", scheduleID, err)
		}
		if _, err := c.river.InsertTx(ctx, tx, BackfillArgs{BackfillID: id}, &river.InsertOpts{Queue: queue}); err != nil {
			return nil, fmt.Errorf("queuing the backfill of schedule %s: %w", scheduleID, err)
		}
	}
	return c.describeBackfill(ctx, tx, id)
}

const backfillColumns = "backfill_id, namespace, schedule_id, range_start, range_end, state, total, started, next_due_at, error, created_at, updated_at"

func scanBackfill(row pgx.Row) (*Backfill, error) {
	var (
		b     Backfill
		state string
	)
	err := row.Scan(&b.ID, &b.Namespace, &b.ScheduleID, &b.Start, &b.End, &state, &b.Total, &b.Started, &b.NextDueAt, &b.Error, &b.CreatedAt, &b.UpdatedAt)
	b.State = BackfillState(state)
	return &b, err
}

func (c *Client) backfillByRange(ctx context.Context, q pgx.Tx, scheduleID string, from, to time.Time) (*Backfill, error) {
	b, err := scanBackfill(q.QueryRow(ctx, "SELECT "+backfillColumns+" FROM "+c.names.Backfill+
		" WHERE namespace = $1 AND schedule_id = $2 AND range_start = $3 AND range_end = $4", c.config.Namespace, scheduleID, from, to))
	if err != nil {
		return nil, fmt.Errorf("reading the backfill of schedule %s: %w", scheduleID, err)
	}
	return b, nil
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (c *Client) describeBackfill(ctx context.Context, q querier, id uuid.UUID) (*Backfill, error) {
	b, err := scanBackfill(q.QueryRow(ctx, "SELECT "+backfillColumns+" FROM "+c.names.Backfill+
		" WHERE namespace = $1 AND backfill_id = $2", c.config.Namespace, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &BackfillNotFoundError{ID: id, Namespace: c.config.Namespace}
	}
	if err != nil {
		return nil, fmt.Errorf("reading backfill %s: %w", id, err)
	}
	return b, nil
}

// DescribeBackfill returns a durable backfill as its progress stands.
func (c *Client) DescribeBackfill(ctx context.Context, id uuid.UUID) (*Backfill, error) {
	return c.describeBackfill(ctx, c.pool, id)
}

// ListBackfills returns the durable backfills of a schedule, newest first
// (none for a schedule that has none or does not exist).
func (c *Client) ListBackfills(ctx context.Context, scheduleID string) ([]*Backfill, error) {
	rows, err := c.pool.Query(ctx, "SELECT "+backfillColumns+" FROM "+c.names.Backfill+
		" WHERE namespace = $1 AND schedule_id = $2 ORDER BY created_at DESC, backfill_id", c.config.Namespace, scheduleID)
	if err != nil {
		return nil, fmt.Errorf("listing backfills: %w", err)
	}
	defer rows.Close()
	out := []*Backfill{}
	for rows.Next() {
		b, err := scanBackfill(rows)
		if err != nil {
			return nil, fmt.Errorf("listing backfills: %w", err)
		}
		out = append(out, b)
	}
	return out, rows.Err()
}
