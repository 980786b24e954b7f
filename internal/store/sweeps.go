package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/engine"
)

// sweepSQL are the statements of weir's background repairs: retention,
// activity and run timeouts, stranded runs, timers' jobs.
type sweepSQL struct {
	lockExpired, deleteRuns, timedOut, endedScan, endedJobs, lockRun, activityExists, deleteActivity string
	strandedScan, strandedLock, runDeadlines, activityPending, activityJob                           string
	timerJobs, jobAvailable, nextTimer, notifyQueue                                                  string
}

func newSweepSQL(n *dbschema.Names) sweepSQL {
	const endedColumns = "SELECT a.run_id, a.scheduled_event_id, a.job_id, j.state::text, coalesce(j.attempt, 0), coalesce(j.errors, '{}')," +
		" coalesce(j.metadata ? 'cancel_attempted_at', false) FROM "
	return sweepSQL{
		lockExpired: "SELECT r.run_id FROM " + n.Run + " r LEFT JOIN " + n.Namespace + " n ON n.name = r.namespace" +
			" WHERE r.state <> 'running' AND r.closed_at < now() - coalesce(n.retention, $1::bigint * interval '1 microsecond')" +
			" ORDER BY r.closed_at LIMIT $2 FOR UPDATE OF r SKIP LOCKED",
		deleteRuns: "WITH e AS (DELETE FROM " + n.Event + " WHERE run_id = ANY($1))," +
			" a AS (DELETE FROM " + n.Activity + " WHERE run_id = ANY($1))," +
			" i AS (DELETE FROM " + n.Inbox + " WHERE run_id = ANY($1))," +
			" q AS (DELETE FROM " + n.Query + " WHERE run_id = ANY($1))," +
			" u AS (DELETE FROM " + n.Update + " WHERE run_id = ANY($1))" +
			" DELETE FROM " + n.Run + " WHERE run_id = ANY($1)",
		timedOut: "SELECT a.run_id, a.scheduled_event_id, a.job_id, coalesce(j.attempt, 0), a.deadline" +
			" FROM " + n.Activity + " a LEFT JOIN " + n.RiverJob + " j ON j.id = a.job_id WHERE a.deadline < now()" +
			" AND NOT EXISTS (SELECT 1 FROM " + n.Inbox + " i WHERE i.run_id = a.run_id AND i.dedup_key = 'activity:' || a.scheduled_event_id)" +
			" LIMIT $1",
		endedScan: endedColumns + n.Activity + " a LEFT JOIN " + n.RiverJob + " j ON j.id = a.job_id" +
			" WHERE j.id IS NULL OR j.state IN ('completed', 'discarded', 'cancelled') LIMIT $1",
		endedJobs:      endedColumns + n.Activity + " a JOIN " + n.RiverJob + " j ON j.id = a.job_id WHERE a.job_id = ANY($1)",
		lockRun:        "SELECT 1 FROM " + n.Run + " WHERE run_id = $1 FOR UPDATE",
		activityExists: "SELECT EXISTS (SELECT 1 FROM " + n.Activity + " WHERE run_id = $1 AND scheduled_event_id = $2)",
		deleteActivity: "DELETE FROM " + n.Activity + " WHERE run_id = $1 AND scheduled_event_id = $2",
		strandedScan: "SELECT r.run_id FROM " + n.Run + " r LEFT JOIN " + n.RiverJob + " j ON j.id = r.task_job_id" +
			" WHERE r.state = 'running' AND (" +
			// No task queued though there is work for one.
			"  (r.task_job_id IS NULL AND (r.next_event_id = 1 OR EXISTS (SELECT 1 FROM " + n.Inbox + " i WHERE i.run_id = r.run_id)))" +
			// The queued task is gone or ended without committing (deleted,
			// cancelled by hand, or discarded after exhausting its attempts).
			"  OR (r.task_job_id IS NOT NULL AND (j.id IS NULL OR j.state IN ('completed', 'discarded', 'cancelled')))) LIMIT $1",
		strandedLock: "SELECT r.namespace, r.kind, r.queue, r.workflow_id, CASE WHEN r.task_job_id IS NULL" +
			"  THEN r.next_event_id = 1 OR EXISTS (SELECT 1 FROM " + n.Inbox + " i WHERE i.run_id = r.run_id)" +
			"  ELSE NOT EXISTS (SELECT 1 FROM " + n.RiverJob + " j WHERE j.id = r.task_job_id" +
			"   AND j.state NOT IN ('completed', 'discarded', 'cancelled')) END" +
			" FROM " + n.Run + " r WHERE r.run_id = $1 AND r.closed_at IS NULL FOR UPDATE",
		runDeadlines: "SELECT state, run_deadline, execution_deadline, now() FROM " + n.Run + " WHERE run_id = $1 FOR UPDATE",
		activityPending: "SELECT r.state, r.workflow_id, r.kind, r.generation, r.trace_context," +
			" EXISTS (SELECT 1 FROM " + n.Activity + " a WHERE a.run_id = r.run_id AND a.scheduled_event_id = $2 AND a.job_id = $3)" +
			" AND NOT EXISTS (SELECT 1 FROM " + n.Inbox + " i WHERE i.run_id = r.run_id AND i.dedup_key = 'activity:' || $2::bigint)" +
			" FROM " + n.Run + " r WHERE r.run_id = $1",
		activityJob: "SELECT job_id FROM " + n.Activity + " WHERE run_id = $1 AND scheduled_event_id = $2",
		timerJobs: "SELECT id FROM " + n.RiverJob + " WHERE kind = $1 AND args @> $2::jsonb" +
			" AND state IN ('available', 'scheduled', 'retryable')",
		jobAvailable: "UPDATE " + n.RiverJob + " SET state = 'available' WHERE id = $1 AND state = 'scheduled'",
		nextTimer: "SELECT queue, scheduled_at, now() FROM " + n.RiverJob +
			" WHERE kind = $1 AND state = 'available' AND scheduled_at > $2 ORDER BY scheduled_at LIMIT 1",
		notifyQueue: "SELECT pg_notify(coalesce(nullif($1::text, ''), current_schema()) || '.river_insert', $2)",
	}
}

// ExpireRuns deletes up to limit closed runs past their namespace's
// retention (else retention), skipping rows others lock, with every row of
// theirs in weir_event, weir_activity, weir_inbox, weir_query and
// weir_update; it returns how many runs it deleted.
//
// No foreign key ties those rows to their run: every writer of one holds
// its run's row lock in its transaction, or inserted the run in it
// (ARCHITECTURE.md, "A run's rows"). So the runs are locked first, and
// their rows deleted by a second statement, whose snapshot (tx is READ
// COMMITTED) is taken after the locks were granted and holds every row a
// writer committed before; a writer that comes after finds no run and
// writes nothing.
func (s *Store) ExpireRuns(ctx context.Context, tx pgx.Tx, retention time.Duration, limit int) (int64, error) {
	runs, err := collectRows(ctx, tx, pgx.RowTo[uuid.UUID], s.sweeps.lockExpired, retention.Microseconds(), limit)
	if err != nil || len(runs) == 0 {
		return 0, err
	}
	tag, err := tx.Exec(ctx, s.sweeps.deleteRuns, runs)
	return tag.RowsAffected(), err
}

// ActivityRef names a pending activity and its job.
type ActivityRef struct {
	RunID            uuid.UUID
	ScheduledEventID int64
	JobID            int64
}

// TimedOutActivity is a pending activity past its deadline.
type TimedOutActivity struct {
	ActivityRef
	Attempt  int
	Deadline time.Time
}

// TimedOutActivities reads up to limit pending activities past their
// deadline whose outcome is not in the inbox.
func (s *Store) TimedOutActivities(ctx context.Context, db DBTX, limit int) ([]TimedOutActivity, error) {
	return collectRows(ctx, db, pgx.RowToStructByPos[TimedOutActivity], s.sweeps.timedOut, limit)
}

// EndedActivity is a pending activity whose job ended (or is gone: nil
// State).
type EndedActivity struct {
	ActivityRef
	State           *string
	Attempt         int
	Errors          [][]byte // River's attempt errors, JSON
	CancelRequested bool
}

// EndedActivities reads the pending activities of jobIDs, or, with none,
// up to limit pending activities whose job ended or is gone.
func (s *Store) EndedActivities(ctx context.Context, db DBTX, jobIDs []int64, limit int) ([]EndedActivity, error) {
	sql, arg := s.sweeps.endedScan, any(limit)
	if jobIDs != nil {
		sql, arg = s.sweeps.endedJobs, jobIDs
	}
	return collectRows(ctx, db, pgx.RowToStructByPos[EndedActivity], sql, arg)
}

// LockRunActivityPending locks the run in tx and then, in a snapshot taken
// after the lock was granted, reports whether the activity is pending.
func (s *Store) LockRunActivityPending(ctx context.Context, tx pgx.Tx, a ActivityRef) (pending bool, err error) {
	batch := &pgx.Batch{}
	batch.Queue(s.sweeps.lockRun, a.RunID)
	batch.Queue(s.sweeps.activityExists, a.RunID, a.ScheduledEventID).QueryRow(func(row pgx.Row) error { return row.Scan(&pending) })
	return pending, tx.SendBatch(ctx, batch).Close()
}

// DeleteActivity deletes a pending activity's row.
func (s *Store) DeleteActivity(ctx context.Context, db DBTX, a ActivityRef) error {
	return exec(ctx, db, s.sweeps.deleteActivity, a.RunID, a.ScheduledEventID)
}

// StrandedRuns reads up to limit running runs that need a workflow task and
// have no usable one.
func (s *Store) StrandedRuns(ctx context.Context, db DBTX, limit int) ([]uuid.UUID, error) {
	return collectRows(ctx, db, pgx.RowTo[uuid.UUID], s.sweeps.strandedScan, limit)
}

// TaskRun is what queueing a run's workflow task needs to know of it
// (inbox.Run).
type TaskRun struct {
	ID                                 uuid.UUID
	Kind, Namespace, Queue, WorkflowID string
}

// LockStrandedRun locks a live run and reports whether it is stranded (as
// StrandedRuns finds them); pgx.ErrNoRows when it is not live.
func (s *Store) LockStrandedRun(ctx context.Context, db DBTX, runID uuid.UUID) (run *TaskRun, stranded bool, err error) {
	run = &TaskRun{ID: runID}
	err = db.QueryRow(ctx, s.sweeps.strandedLock, runID).Scan(&run.Namespace, &run.Kind, &run.Queue, &run.WorkflowID, &stranded)
	return run, stranded, err
}

// RunDeadlines are a run's state and timeouts, with the database's clock.
type RunDeadlines struct {
	State                          string
	RunDeadline, ExecutionDeadline *time.Time
	Now                            time.Time
}

// LockRunDeadlines locks a run and reads its deadlines.
func (s *Store) LockRunDeadlines(ctx context.Context, db DBTX, runID uuid.UUID) (*RunDeadlines, error) {
	var d RunDeadlines
	return &d, db.QueryRow(ctx, s.sweeps.runDeadlines, runID).Scan(&d.State, &d.RunDeadline, &d.ExecutionDeadline, &d.Now)
}

// ActivityPending reads the activity's run (its state, workflow ID, kind,
// generation and trace context) and whether the activity is pending with
// this job and no outcome in the inbox; pgx.ErrNoRows when the run does not
// exist.
func (s *Store) ActivityPending(ctx context.Context, db DBTX, a ActivityRef) (run *engine.Run, pending bool, err error) {
	run = &engine.Run{ID: a.RunID}
	err = db.QueryRow(ctx, s.sweeps.activityPending, a.RunID, a.ScheduledEventID, a.JobID).
		Scan(&run.State, &run.WorkflowID, &run.Kind, &run.Generation, &run.TraceContext, &pending)
	return run, pending, err
}

// ActivityJob reads the job of a pending activity; pgx.ErrNoRows when it is
// not pending.
func (s *Store) ActivityJob(ctx context.Context, db DBTX, runID uuid.UUID, scheduledEventID int64) (jobID int64, err error) {
	return jobID, db.QueryRow(ctx, s.sweeps.activityJob, runID, scheduledEventID).Scan(&jobID)
}

// UnfinishedJobs reads the jobs of kind whose args contain argsJSON and
// that have not run yet or retry.
func (s *Store) UnfinishedJobs(ctx context.Context, db DBTX, kind string, argsJSON []byte) ([]int64, error) {
	return collectRows(ctx, db, pgx.RowTo[int64], s.sweeps.timerJobs, kind, argsJSON)
}

// MakeJobAvailable makes a scheduled job available: River fetches it as
// soon as it is due and a fetch happens.
func (s *Store) MakeJobAvailable(ctx context.Context, db DBTX, jobID int64) error {
	return exec(ctx, db, s.sweeps.jobAvailable, jobID)
}

// NextAvailableJob reads the queue and due time of the soonest available
// job of kind due after after, and the database's clock; pgx.ErrNoRows when
// there is none.
func (s *Store) NextAvailableJob(ctx context.Context, db DBTX, kind string, after time.Time) (queue string, due, now time.Time, err error) {
	return queue, due, now, db.QueryRow(ctx, s.sweeps.nextTimer, kind, after).Scan(&queue, &due, &now)
}

// NotifyQueue sends River's insert notification with payload (JSON naming
// the queue), as River's own insert does.
func (s *Store) NotifyQueue(ctx context.Context, db DBTX, payload []byte) error {
	return exec(ctx, db, s.sweeps.notifyQueue, s.names.Schema, string(payload))
}
