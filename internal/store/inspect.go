package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/dbschema"
)

// inspectSQL are the reads behind Describe and the web UI.
type inspectSQL struct {
	run, activities, inbox, timers, attempts, namespaces, signalKinds string
}

func newInspectSQL(n *dbschema.Names) inspectSQL {
	attemptLog := dbschema.Qualify(n.Schema, "weir_job_attempt")
	const jobColumns = "id, kind, state, attempt, attempted_at, attempted_by, lease_token, lease_expires_at, lease_last_token, finalized_at, errors FROM "
	const attemptError = "(SELECT e->>'error' FROM unnest(j.errors) e WHERE (e->>'attempt')::int = %s LIMIT 1)"
	return inspectSQL{
		run: "SELECT r.namespace, r.workflow_id, r.generation, r.kind, r.queue, r.state, r.args, r.result, r.failure, r.next_event_id - 1," +
			" r.task_job_id, r.run_deadline, r.execution_deadline, r.created_at, r.updated_at, r.closed_at, r.parent_run_id, p.workflow_id" +
			" FROM " + n.Run + " r LEFT JOIN " + n.Run + " p ON p.run_id = r.parent_run_id WHERE r.run_id = $1",
		activities: "SELECT coalesce(j.attempt, 0), j.attempted_at, a.job_id, coalesce(j.state::text, ''), a.kind," +
			" coalesce(j.errors[array_length(j.errors, 1)]->>'error', ''), j.lease_expires_at, coalesce(j.max_attempts, 0)," +
			" j.scheduled_at, a.scheduled_event_id FROM " + n.Activity + " a LEFT JOIN " + n.RiverJob + " j ON j.id = a.job_id" +
			" WHERE a.run_id = $1 ORDER BY a.scheduled_event_id",
		inbox: "SELECT created_at, dedup_key, type FROM " + n.Inbox + " WHERE run_id = $1 ORDER BY id",
		timers: "SELECT (s.attributes->>'fire_at')::timestamptz, s.event_id FROM " + n.Event + " s" +
			" WHERE s.run_id = $1 AND s.type = 'TimerStarted' AND NOT EXISTS (SELECT 1 FROM " + n.Event + " r" +
			" WHERE r.run_id = $1 AND (r.resolves_event_id = s.event_id" +
			" OR (r.type = 'TimerCanceled' AND (r.attributes->>'started_event_id')::bigint = s.event_id)))" +
			" ORDER BY s.event_id",
		attempts: "WITH jobs AS (SELECT " + jobColumns + n.RiverJob + " WHERE metadata @> $1::jsonb" +
			" UNION ALL SELECT " + jobColumns + n.RiverJob + " WHERE args @> $2::jsonb AND starts_with(kind, $3))" +
			" SELECT * FROM (" +
			"  SELECT NOT starts_with(j.kind, $3), a.attempt::int," +
			"   coalesce(CASE WHEN a.outcome <> 'superseded' THEN " + // a stale attempt's error was never written
			fmt.Sprintf(attemptError, "a.attempt") + " END, '')," +
			"   a.finished_at, j.id, j.kind, NULL::timestamptz, coalesce(a.lease_token::text, ''), a.outcome, a.started_at," +
			"   coalesce(a.attempted_by, '')" +
			"  FROM jobs j JOIN " + attemptLog + " a ON a.job_id = j.id" +
			"  UNION ALL" + // the attempt that finalized its job, kept on the job's row unless logged (fencing 003)
			"  SELECT NOT starts_with(j.kind, $3), j.attempt::int, coalesce(" + fmt.Sprintf(attemptError, "j.attempt") + ", '')," +
			"   j.finalized_at, j.id, j.kind, NULL, coalesce(j.lease_last_token::text, ''), j.state::text, j.attempted_at," +
			"   coalesce(j.attempted_by[array_upper(j.attempted_by, 1)], '')" +
			"  FROM jobs j WHERE j.state IN ('completed', 'cancelled', 'discarded') AND j.attempt > 0 AND j.attempted_at IS NOT NULL" +
			"   AND NOT EXISTS (SELECT 1 FROM " + attemptLog + " a WHERE a.job_id = j.id AND a.attempt = j.attempt AND a.started_at = j.attempted_at)" +
			"  UNION ALL" +
			"  SELECT NOT starts_with(j.kind, $3), j.attempt::int, '', NULL, j.id, j.kind, j.lease_expires_at," +
			"   coalesce(j.lease_token::text, ''), 'running', j.attempted_at, coalesce(j.attempted_by[array_upper(j.attempted_by, 1)], '')" +
			"  FROM jobs j WHERE j.state = 'running'" +
			" ) x ORDER BY 10 NULLS LAST, 5, 2 LIMIT $4",
		namespaces: "SELECT name FROM " + n.Namespace + " ORDER BY name LIMIT $1",
		signalKinds: "SELECT DISTINCT attributes->>'kind' FROM " + n.History +
			" WHERE run_id = $1 AND type = 'SignalReceived' AND attributes->>'kind' IS NOT NULL ORDER BY 1 LIMIT $2",
	}
}

// RunDescription is what Describe reads of a run.
type RunDescription struct {
	Namespace, WorkflowID, Kind, Queue, State string
	Generation, HistoryLength                 int64
	Args, Result, Failure                     []byte
	TaskJobID                                 *int64
	RunDeadline, ExecutionDeadline, ClosedAt  *time.Time
	CreatedAt, UpdatedAt                      time.Time
	ParentRunID                               *uuid.UUID
	ParentWorkflowID                          *string // nil once the parent is deleted
}

// DescribeRun reads a run; pgx.ErrNoRows when there is none.
func (s *Store) DescribeRun(ctx context.Context, db DBTX, runID uuid.UUID) (*RunDescription, error) {
	var d RunDescription
	return &d, db.QueryRow(ctx, s.inspect.run, runID).Scan(&d.Namespace, &d.WorkflowID, &d.Generation, &d.Kind, &d.Queue, &d.State,
		&d.Args, &d.Result, &d.Failure, &d.HistoryLength, &d.TaskJobID, &d.RunDeadline, &d.ExecutionDeadline, &d.CreatedAt,
		&d.UpdatedAt, &d.ClosedAt, &d.ParentRunID, &d.ParentWorkflowID)
}

// PendingActivities reads a run's pending activities, in schedule order,
// into T: a struct of attempt, attempted_at, job_id, job state, kind, last
// error, lease_expires_at, max_attempts, scheduled_at, scheduled_event_id in
// that order (client.PendingActivity).
func PendingActivities[T any](ctx context.Context, s *Store, db DBTX, runID uuid.UUID) ([]*T, error) {
	return collectRows(ctx, db, pgx.RowToAddrOfStructByPos[T], s.inspect.activities, runID)
}

// PendingInbox reads a run's inbox, oldest first, into T: a struct of
// created_at, dedup_key, type in that order (client.PendingInboxItem).
func PendingInbox[T any](ctx context.Context, s *Store, db DBTX, runID uuid.UUID) ([]*T, error) {
	return collectRows(ctx, db, pgx.RowToAddrOfStructByPos[T], s.inspect.inbox, runID)
}

// PendingTimers reads the run's timers that history started and neither
// fired nor cancelled, oldest first, into T: a struct of fire_at,
// started_event_id in that order (client.PendingTimer).
func PendingTimers[T any](ctx context.Context, s *Store, db DBTX, runID uuid.UUID) ([]*T, error) {
	return collectRows(ctx, db, pgx.RowToAddrOfStructByPos[T], s.inspect.timers, runID)
}

// JobAttempt is one attempt of a run's River job: a finished one from the
// fencing attempt log or, for the attempt that finalized its job, from the
// job's row; or the one running now (Outcome "running").
type JobAttempt struct {
	Activity       bool // an activity's job; otherwise a workflow task's
	Attempt        int
	Error          string // the attempt's error, from the job's errors
	FinishedAt     *time.Time
	JobID          int64
	Kind           string
	LeaseExpiresAt *time.Time
	LeaseToken     string
	Outcome        string
	StartedAt      *time.Time
	Worker         string
}

// JobAttemptsParams find a run's jobs: its activities by metadata, its
// workflow tasks by args and kind prefix.
type JobAttemptsParams struct {
	Metadata, Args []byte
	TaskKindPrefix string
	Limit          int
}

// JobAttempts reads the attempts of a run's jobs, oldest first. Without the
// fencing attempt log it fails with Postgres's undefined table error.
func (s *Store) JobAttempts(ctx context.Context, db DBTX, p JobAttemptsParams) ([]*JobAttempt, error) {
	return collectRows(ctx, db, pgx.RowToAddrOfStructByPos[JobAttempt], s.inspect.attempts, p.Metadata, p.Args, p.TaskKindPrefix, p.Limit)
}

// NamespaceNames reads up to limit registered namespaces, by name.
func (s *Store) NamespaceNames(ctx context.Context, db DBTX, limit int) ([]string, error) {
	return collectRows(ctx, db, pgx.RowTo[string], s.inspect.namespaces, limit)
}

// SignalKinds reads up to limit kinds of the signals a run received, by
// name.
func (s *Store) SignalKinds(ctx context.Context, db DBTX, runID uuid.UUID, limit int) ([]string, error) {
	return collectRows(ctx, db, pgx.RowTo[string], s.inspect.signalKinds, runID, limit)
}
