package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/history"
)

// lifecycleSQL are the statements of a run's life around its steps' writes:
// a child's start and a run's next (continue-as-new) from a task, a run
// closed from outside (terminate, timeouts) and its family told, and an
// attempt's check of its lease.
type lifecycleSQL struct {
	taskInfo, needsTask, liveRun, startChild, startNext, moveSignals  string
	lockClosing, close, clearActivities, clearInbox, parent, children string
	leaseHeld, leaseLock                                              string
}

func newLifecycleSQL(n *dbschema.Names) lifecycleSQL {
	const leaseHeldWhere = " WHERE id = $1 AND state = 'running' AND attempt = $2" +
		" AND (lease_token::text = $3::text OR ($3::text = '' AND attempted_at = $4))"
	return lifecycleSQL{
		taskInfo: "SELECT trace_context, generation, namespace, created_at FROM " + n.Run + " WHERE run_id = $1",
		needsTask: "SELECT EXISTS (SELECT 1 FROM " + n.Inbox + " WHERE run_id = $1)" +
			" AND (SELECT task_job_id IS NULL FROM " + n.Run + " WHERE run_id = $1)",
		liveRun: "SELECT run_id FROM " + n.Run + " WHERE namespace = $1 AND workflow_id = $2 AND state = 'running'",
		startChild: "WITH g AS (INSERT INTO " + n.Workflow + " AS w (namespace, workflow_id, last_generation) VALUES ($11, $2, 1)" +
			"  ON CONFLICT (namespace, workflow_id) DO UPDATE SET last_generation = w.last_generation + 1 RETURNING last_generation)" +
			" INSERT INTO " + n.Run + " (run_id, namespace, workflow_id, generation, kind, queue, args, request_id, request_hash," +
			"  run_deadline, parent_run_id, parent_event_id, parent_close_policy, trace_context)" +
			" SELECT $1, p.namespace, $2, g.last_generation, $3, $4, $5, $6, $7, now() + nullif($8::bigint, 0) * interval '1 microsecond'," +
			"  p.run_id, $9, $10, p.trace_context FROM " + n.Run + " p, g WHERE p.run_id = $12",
		startNext: "WITH g AS (UPDATE " + n.Workflow + " w SET last_generation = w.last_generation + 1 FROM " + n.Run + " p" +
			"  WHERE p.run_id = $6 AND w.namespace = p.namespace AND w.workflow_id = p.workflow_id RETURNING w.last_generation)" +
			" INSERT INTO " + n.Run + " (run_id, namespace, workflow_id, generation, kind, queue, args, request_id, request_hash," +
			"  execution_deadline, previous_run_id, trace_context)" +
			" SELECT $1, p.namespace, p.workflow_id, g.last_generation, $2, p.queue, $3, $4, $5, p.execution_deadline, p.run_id, p.trace_context" +
			" FROM " + n.Run + " p, g WHERE p.run_id = $6",
		moveSignals: "UPDATE " + n.Inbox + " SET run_id = $2 WHERE run_id = $1 AND type = $3",
		lockClosing: "SELECT state, failure, generation, workflow_id, task_job_id FROM " + n.Run + " WHERE run_id = $1 FOR UPDATE",
		close: "UPDATE " + n.Run + " SET state = $2, failure = $3, closed_at = now(), updated_at = now(), task_job_id = NULL" +
			" WHERE run_id = $1",
		clearActivities: "DELETE FROM " + n.Activity + " WHERE run_id = $1 RETURNING job_id",
		clearInbox:      "DELETE FROM " + n.Inbox + " WHERE run_id = $1",
		parent:          "SELECT parent_run_id, parent_event_id, state, result, failure FROM " + n.Run + " WHERE run_id = $1",
		children: "SELECT run_id, coalesce(parent_close_policy, $2) FROM " + n.Run +
			" WHERE parent_run_id = $1 AND state = 'running'",
		leaseHeld: "SELECT EXISTS (SELECT 1 FROM " + n.RiverJob + leaseHeldWhere + ")",
		leaseLock: "SELECT 1 FROM " + n.RiverJob + leaseHeldWhere + " FOR UPDATE",
	}
}

// TaskRunInfo is what interceptors are told of a task's run.
type TaskRunInfo struct {
	TraceContext []byte
	Generation   int64
	Namespace    string
	CreatedAt    time.Time
}

// GetTaskRunInfo reads what interceptors are told of a run's task;
// pgx.ErrNoRows when there is no such run.
func (s *Store) GetTaskRunInfo(ctx context.Context, db DBTX, runID uuid.UUID) (*TaskRunInfo, error) {
	var i TaskRunInfo
	return &i, db.QueryRow(ctx, s.lifecycle.taskInfo, runID).Scan(&i.TraceContext, &i.Generation, &i.Namespace, &i.CreatedAt)
}

// NeedsTask reports whether a run has inbox rows and no queued task.
func (s *Store) NeedsTask(ctx context.Context, db DBTX, runID uuid.UUID) (needs bool, err error) {
	return needs, db.QueryRow(ctx, s.lifecycle.needsTask, runID).Scan(&needs)
}

// LockLiveRun takes the start lock of a workflow ID (W1), waiting, and then
// reads its live run; pgx.ErrNoRows when it has none.
func (s *Store) LockLiveRun(ctx context.Context, tx pgx.Tx, namespace, workflowID string) (live uuid.UUID, err error) {
	batch := &pgx.Batch{}
	s.QueueStartLock(batch, namespace, workflowID)
	batch.Queue(s.lifecycle.liveRun, namespace, workflowID).QueryRow(func(row pgx.Row) error { return row.Scan(&live) })
	return live, tx.SendBatch(ctx, batch).Close()
}

// ChildRunParams are a child workflow's run, started by event EventID of
// run Parent, in the parent's namespace and with its trace context.
type ChildRunParams struct {
	RunID, Parent                  uuid.UUID
	EventID                        int64
	Namespace, WorkflowID          string
	Kind, Queue, ParentClosePolicy string
	Args                           []byte
	RunTimeout                     time.Duration // 0: none
}

// StartChildRun inserts a child workflow's run with the next generation of
// its workflow ID; its request ID names the parent's event.
func (s *Store) StartChildRun(ctx context.Context, db DBTX, p ChildRunParams) error {
	requestID := fmt.Sprintf("child:%s:%d", p.Parent, p.EventID)
	return insertedOne(db.Exec(ctx, s.lifecycle.startChild, p.RunID, p.WorkflowID, p.Kind, p.Queue, p.Args, requestID,
		requestHash(p.Kind, p.Args), p.RunTimeout.Microseconds(), p.EventID, p.ParentClosePolicy, p.Namespace, p.Parent))
}

// StartNextRun inserts run next, which continues run previous as new, with
// the next generation of its workflow ID and previous's namespace, queue
// and execution deadline.
func (s *Store) StartNextRun(ctx context.Context, db DBTX, previous, next uuid.UUID, kind string, args []byte) error {
	return insertedOne(db.Exec(ctx, s.lifecycle.startNext, next, kind, args, "continue-as-new:"+previous.String(),
		requestHash(kind, args), previous))
}

// MoveSignals moves the signals waiting in run from's inbox to run to's.
func (s *Store) MoveSignals(ctx context.Context, db DBTX, from, to uuid.UUID) error {
	_, err := db.Exec(ctx, s.lifecycle.moveSignals, from, to, string(history.EventSignalReceived))
	return err
}

// requestHash is a start's request hash: of its kind and args.
func requestHash(kind string, args []byte) []byte {
	hash := sha256.Sum256(append([]byte(kind+"\x00"), args...))
	return hash[:]
}

// insertedOne fails unless its statement wrote exactly one row.
func insertedOne(tag interface{ RowsAffected() int64 }, err error) error {
	if err == nil && tag.RowsAffected() != 1 {
		err = errors.New("store: the run to start from is gone")
	}
	return err
}

// ClosingRun is a run's row as LockClosingRun reads it.
type ClosingRun struct {
	State      string
	Failure    []byte
	Generation int64
	WorkflowID string
	TaskJobID  *int64
}

// LockClosingRun locks a run to close it from outside and reads it;
// pgx.ErrNoRows when there is none.
func (s *Store) LockClosingRun(ctx context.Context, db DBTX, runID uuid.UUID) (*ClosingRun, error) {
	var r ClosingRun
	return &r, db.QueryRow(ctx, s.lifecycle.lockClosing, runID).Scan(&r.State, &r.Failure, &r.Generation, &r.WorkflowID, &r.TaskJobID)
}

// CloseRun closes a run with state and failure (JSON) and no queued task,
// and deletes its pending activities and its inbox; it returns the
// activities' jobs.
func (s *Store) CloseRun(ctx context.Context, tx pgx.Tx, runID uuid.UUID, state string, failure []byte) (activityJobs []int64, err error) {
	batch := &pgx.Batch{}
	batch.Queue(s.lifecycle.close, runID, state, failure)
	batch.Queue(s.lifecycle.clearActivities, runID).Query(func(rows pgx.Rows) (err error) {
		activityJobs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	batch.Queue(s.lifecycle.clearInbox, runID)
	return activityJobs, tx.SendBatch(ctx, batch).Close()
}

// RunParent is a run's parent (nil: none) with the run's state and
// payloads.
type RunParent struct {
	ParentRunID     *uuid.UUID
	ParentEventID   *int64
	State           string
	Result, Failure []byte
}

// GetRunParent reads a run's parent; pgx.ErrNoRows when there is no such
// run.
func (s *Store) GetRunParent(ctx context.Context, db DBTX, runID uuid.UUID) (*RunParent, error) {
	var p RunParent
	return &p, db.QueryRow(ctx, s.lifecycle.parent, runID).Scan(&p.ParentRunID, &p.ParentEventID, &p.State, &p.Result, &p.Failure)
}

// RunChild is a running child of a run and its parent-close policy.
type RunChild struct {
	RunID  uuid.UUID
	Policy string
}

// RunningChildren reads the running children of a run, with
// defaultPolicy for those whose policy is not set.
func (s *Store) RunningChildren(ctx context.Context, db DBTX, runID uuid.UUID, defaultPolicy string) ([]RunChild, error) {
	return collectRows(ctx, db, pgx.RowToStructByPos[RunChild], s.lifecycle.children, runID, defaultPolicy)
}

// LeaseRef is an attempt's proof that it holds its job: its number and
// lease token, or, without a token, when it started.
type LeaseRef struct {
	JobID       int64
	Attempt     int
	Token       string
	AttemptedAt time.Time
}

// LeaseHeld reports whether the attempt still holds its job; with lock, it
// locks the job's row until the transaction ends.
func (s *Store) LeaseHeld(ctx context.Context, db DBTX, l LeaseRef, lock bool) (held bool, err error) {
	args := []any{l.JobID, l.Attempt, l.Token, l.AttemptedAt}
	if !lock {
		return held, db.QueryRow(ctx, s.lifecycle.leaseHeld, args...).Scan(&held)
	}
	var one int
	err = db.QueryRow(ctx, s.lifecycle.leaseLock, args...).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}
