package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/weirhq/weir/internal/array"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/task"
)

// startStatements are the statements of a run's start: a client's start
// alone, in one round trip, or in a group of starts.
type startStatements struct {
	lock, tryLocks, run, runOne, aheadGuard, startedGuard, failedAttempt, taskJob string
}

func newStartStatements(names *dbschema.Names) startStatements {
	return startStatements{
		lock: "SELECT pg_advisory_xact_lock(" + dbschema.StartLockSQL("$1", "$2", "$3") + ")",
		tryLocks: "SELECT coalesce(array_agg(pg_try_advisory_xact_lock(" + dbschema.StartLockSQL("$3", "n", "w") + ") ORDER BY i), '{}')" +
			" FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(n, w, i)",
		run:           startRunSQL(names),
		runOne:        startOneSQL(names),
		aheadGuard:    "SELECT now(), 1 / (SELECT count(*)::int FROM " + names.Run + " WHERE run_id = $1 AND generation = 1)",
		startedGuard:  "SELECT 1 / (count(*) = cardinality($1::uuid[]))::int FROM " + names.Run + " WHERE run_id = ANY($1::uuid[])",
		failedAttempt: "UPDATE " + names.RiverJob + " SET attempt = 1, attempted_at = now(), errors = array_append(errors, $2::jsonb) WHERE id = $1",
		taskJob:       "UPDATE " + names.Run + " SET task_job_id = $2 WHERE run_id = $1",
	}
}

// StartRunParams is a start's run: what its lookup looks for and, with
// Insert, what it inserts unless the lookup found a reason not to.
type StartRunParams struct {
	RunID                        uuid.UUID
	Namespace, WorkflowID        string
	Kind, Queue                  string
	Args                         []byte
	RequestID                    string
	RequestHash                  []byte
	RunTimeout, ExecutionTimeout time.Duration // 0: none
	TraceContext                 []byte
	TaskJobID                    *int64 // the first task's job, queued; nil when a worker takes the task
	// QueueTask: the insert queues the first task's River job with the run
	// (TaskJobID nil), of kind task.Kind(Namespace, Kind), on Queue, its
	// args task.Args.
	QueueTask bool
	// NextEventID is the run's append point as inserted; 0 means 1 (an
	// empty history). A start in one round trip inserts its run at the
	// append point its first task, run ahead, leaves (eagerstart.Run).
	NextEventID int64

	Insert bool
	// The ID reuse policy: RejectAny refuses the start if the workflow ID
	// has any run, RejectCompleted if its last run completed.
	RejectAny, RejectCompleted bool
	// CreatedAt is the run's creation time; nil means the database's now().
	CreatedAt *time.Time
}

// StartRuns are the starts of one statement (QueueStartRuns), by
// position: their params are read where the starts hold them, not copied
// into a slice of their own.
type StartRuns interface {
	Len() int
	Params(i int) StartRunParams
}

// Len and Params make p the StartRuns of one start.
func (p *StartRunParams) Len() int                  { return 1 }
func (p *StartRunParams) Params(int) StartRunParams { return *p }

// FoundRun is a run that a start's lookup found.
type FoundRun struct {
	RunID       uuid.UUID
	Generation  int64
	RequestHash []byte // only of ByRequest
	State       string
}

// StartRunResult is what a start's lookup found and its insert made.
type StartRunResult struct {
	// Read is set once the statement's rows were all read.
	Read bool
	// The run of the same request ID, the live run, and the last run of the
	// workflow ID, as the lookup found them (nil: none).
	ByRequest, Live, Last *FoundRun

	Inserted                       bool
	Generation                     int64
	CreatedAt                      time.Time
	RunDeadline, ExecutionDeadline *time.Time
}

// readStartRuns reads startRunSQL's rows (its start k from 1, then which:
// 0 for the inserted run, 1–3 for what the lookup found: by request, live,
// last) into into, by start.
func readStartRuns(rows pgx.Rows, into []StartRunResult) error {
	var ( // one row's, read over by the next
		k, which                                  int
		runID                                     pgtype.UUID // uuid.UUID goes through database/sql's Scanner, as text
		f                                         FoundRun
		runDeadline, executionDeadline, createdAt *time.Time
	)
	dest := []any{&k, &which, &runID, &f.Generation, &f.RequestHash, &f.State, &runDeadline, &executionDeadline, &createdAt}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if k < 1 || k > len(into) || which < 0 || which > 3 {
			return fmt.Errorf("store: a start's lookup returned a row of kind %d for start %d of %d", which, k, len(into))
		}
		r := &into[k-1]
		if which > 0 {
			f.RunID = runID.Bytes
			found := f // pgx scans each row's hash, state and times anew
			*[]**FoundRun{nil, &r.ByRequest, &r.Live, &r.Last}[which] = &found
			continue
		}
		r.Inserted, r.Generation, r.RunDeadline, r.ExecutionDeadline = true, f.Generation, runDeadline, executionDeadline
		if createdAt != nil {
			r.CreatedAt = *createdAt
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for i := range into {
		into[i].Read = true
	}
	return nil
}

// QueueStartLock queues the lock that serializes the starts of a workflow
// ID until the transaction ends (W1).
func (s *Store) QueueStartLock(batch *pgx.Batch, namespace, workflowID string) {
	batch.Queue(s.starts.lock, s.names.Schema, namespace, workflowID)
}

// QueueTryStartLocks queues the start locks of starts' workflow IDs, taken
// in that order without waiting; into gets, by start, whether its lock was
// granted.
func (s *Store) QueueTryStartLocks(batch *pgx.Batch, starts StartRuns, into *[]bool) {
	n := starts.Len()
	namespaces := column(starts, func(p StartRunParams) string { return p.Namespace })
	workflowIDs := column(starts, func(p StartRunParams) string { return p.WorkflowID })
	batch.Queue(s.starts.tryLocks, array.Texts(namespaces), array.Texts(workflowIDs), s.names.Schema).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(into); err != nil {
			return err
		}
		if len(*into) != n {
			return fmt.Errorf("store: locking %d workflow IDs: %d answers", n, len(*into))
		}
		return nil
	})
}

// QueueStartRuns queues, in one statement, the lookups of starts and, with
// Insert, the inserts of their runs, and reads what each did into into (as
// long as starts): one start by startOneSQL, more by startRunSQL between
// dbschema.HashJoinsSQL and HashJoinsEndSQL.
func (s *Store) QueueStartRuns(batch *pgx.Batch, starts StartRuns, into []StartRunResult) {
	clear(into)
	if starts.Len() == 1 {
		p := starts.Params(0)
		batch.Queue(s.starts.runOne, startOneArgs(&p)...).Query(func(rows pgx.Rows) error { return readStartRuns(rows, into) })
		return
	}
	batch.Queue(dbschema.HashJoinsSQL)
	batch.Queue(s.starts.run, startRunArgs(starts)...).Query(func(rows pgx.Rows) error { return readStartRuns(rows, into) })
	batch.Queue(dbschema.HashJoinsEndSQL)
}

// startRunArgs are startRunSQL's arguments: an array by column of starts,
// its timeouts in microseconds (0: none). Lookups alone (no start inserts)
// send only what they look up by: unnest pads the other columns with NULLs,
// and a start whose insert is NULL inserts nothing. A column that may be
// NULL or zero alike (a task job, a timeout, a creation time, an append
// point, queuing the task) is NULL when it is zero for every start.
func startRunArgs(starts StartRuns) []any {
	args := make([]any, 18)
	args[1] = array.Texts(column(starts, func(p StartRunParams) string { return p.Namespace }))
	args[2] = array.Texts(column(starts, func(p StartRunParams) string { return p.WorkflowID }))
	args[6] = array.Texts(column(starts, func(p StartRunParams) string { return p.RequestID }))
	insert := columnOrNil(starts, func(p StartRunParams) bool { return p.Insert })
	if insert == nil {
		return args
	}
	args[0] = array.UUIDs(column(starts, func(p StartRunParams) uuid.UUID { return p.RunID }))
	args[3] = array.Texts(column(starts, func(p StartRunParams) string { return p.Kind }))
	args[4] = array.Texts(column(starts, func(p StartRunParams) string { return p.Queue }))
	args[5] = array.Bytes(column(starts, func(p StartRunParams) []byte { return p.Args }))
	args[7] = array.Bytes(column(starts, func(p StartRunParams) []byte { return p.RequestHash }))
	args[8] = array.JSON(column(starts, func(p StartRunParams) []byte { return p.TraceContext }))
	args[9] = column(starts, func(p StartRunParams) bool { return p.RejectAny })
	args[10] = column(starts, func(p StartRunParams) bool { return p.RejectCompleted })
	args[11] = insert
	args[12] = array.NullInt64s(columnOrNil(starts, func(p StartRunParams) *int64 { return p.TaskJobID }))
	args[13] = array.Int64s(columnOrNil(starts, func(p StartRunParams) int64 { return p.RunTimeout.Microseconds() }))
	args[14] = array.Int64s(columnOrNil(starts, func(p StartRunParams) int64 { return p.ExecutionTimeout.Microseconds() }))
	args[15] = array.NullTimes(columnOrNil(starts, func(p StartRunParams) *time.Time { return p.CreatedAt }))
	args[16] = array.Int64s(columnOrNil(starts, func(p StartRunParams) int64 { return p.NextEventID }))
	args[17] = columnOrNil(starts, func(p StartRunParams) bool { return p.QueueTask })
	return args
}

// startOneArgs are startOneSQL's arguments, of one start: its timeouts in
// microseconds (0: none). A lookup alone (no insert) sends only what it
// looks up by; its other parameters are NULL.
func startOneArgs(p *StartRunParams) []any {
	args := make([]any, 18)
	args[1], args[2], args[6] = p.Namespace, p.WorkflowID, p.RequestID
	if !p.Insert {
		return args
	}
	args[0] = pgtype.UUID{Bytes: p.RunID, Valid: true}
	args[3], args[4], args[5], args[7] = p.Kind, p.Queue, p.Args, p.RequestHash
	args[8] = pgtype.Text{String: string(p.TraceContext), Valid: p.TraceContext != nil} // text, as any exec mode sends it
	args[9], args[10], args[11] = p.RejectAny, p.RejectCompleted, true
	args[12], args[15] = p.TaskJobID, p.CreatedAt
	args[13], args[14] = p.RunTimeout.Microseconds(), p.ExecutionTimeout.Microseconds()
	args[16], args[17] = p.NextEventID, p.QueueTask
	return args
}

// column is f of each of starts, in order.
func column[T any](starts StartRuns, f func(StartRunParams) T) []T {
	out := make([]T, starts.Len())
	for i := range out {
		out[i] = f(starts.Params(i))
	}
	return out
}

// columnOrNil is column(starts, f), or nil if f is zero for each of
// starts.
func columnOrNil[T comparable](starts StartRuns, f func(StartRunParams) T) []T {
	var zero T
	for i := range starts.Len() {
		if f(starts.Params(i)) != zero {
			return column(starts, f)
		}
	}
	return nil
}

// QueueStartAheadGuard queues the guard of a start in one round trip,
// right after its run's insert: it fails the batch (division by zero)
// unless run runID exists at generation 1, as the insert makes it when
// nothing refuses it, and reads the database's now() into now.
func (s *Store) QueueStartAheadGuard(batch *pgx.Batch, runID uuid.UUID, now *time.Time) {
	batch.Queue(s.starts.aheadGuard, runID).QueryRow(func(row pgx.Row) error {
		var one int
		return row.Scan(now, &one)
	})
}

// QueueStartedGuard queues the guard of a group of starts, right after
// their runs' insert: it fails the batch (division by zero) unless every
// run of runIDs exists, as the insert makes them when nothing refuses them.
func (s *Store) QueueStartedGuard(batch *pgx.Batch, runIDs []uuid.UUID) {
	batch.Queue(s.starts.startedGuard, array.UUIDs(runIDs))
}

// QueueFirstTaskSavepoint queues the savepoint that a start takes right
// after its run's insert, before a worker runs the first task in it.
func (s *Store) QueueFirstTaskSavepoint(batch *pgx.Batch) {
	batch.Queue("SAVEPOINT weir_first_task")
}

// RollbackFirstTask undoes what a first task wrote in its start, back to
// the savepoint QueueFirstTaskSavepoint took.
func (s *Store) RollbackFirstTask(ctx context.Context, db DBTX) error {
	return exec(ctx, db, "ROLLBACK TO SAVEPOINT weir_first_task")
}

// QueuedFirstTaskParams is a first task that its start queued through
// River after its worker declined it or it failed in the start.
type QueuedFirstTaskParams struct {
	RunID uuid.UUID
	JobID int64
	// AttemptError is the failed attempt's rivertype.AttemptError as JSON,
	// recorded as the job's first attempt; nil when the task was declined.
	AttemptError []byte
}

// QueueQueuedFirstTask queues the writes that record a first task queued
// through River: the run names the task's job, and a task that failed has
// its first attempt on the job, as if River had run it.
func (s *Store) QueueQueuedFirstTask(batch *pgx.Batch, p QueuedFirstTaskParams) {
	if p.AttemptError != nil {
		batch.Queue(s.starts.failedAttempt, p.JobID, p.AttemptError)
	}
	batch.Queue(s.starts.taskJob, p.RunID, p.JobID)
}

// startRunSQL looks up, for each start (by position: 1, 2, …), the runs it
// must know of (by request ID, the live one, the last one) and, when it
// inserts and none of them refuses it, inserts its run with its generation
// and, when it queues its task, its first task's River job as River's
// insert would (startTaskValuesSQL), which the run names: a run and its
// job are written together or not at all.
// Its arguments are startRunArgs; its rows, readStartRuns's. Every lookup
// reads the snapshot from before the inserts. Each start looks its runs up
// by key on its own (LATERAL, LIMIT 1: W2 and W1 allow one run per request
// ID and one live run per workflow ID): a generic plan made while few runs
// were live once hash-joined each group against all of weir_run_live_idx.
func startRunSQL(names *dbschema.Names) string {
	return "WITH v AS (SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::text[]," +
		"  $8::bytea[], $9::text[], $10::boolean[], $11::boolean[], $12::boolean[], $13::bigint[], $14::bigint[], $15::bigint[]," +
		"  $16::timestamptz[], $17::bigint[], $18::boolean[]) WITH ORDINALITY AS v(run_id, namespace, workflow_id, kind, queue, args," +
		"  request_id, request_hash, trace_context, reject_any, reject_completed, insert, task_job_id, run_timeout, execution_timeout, created_at," +
		"  next_event_id, queue_task, k))," +
		" found AS (" +
		"  SELECT v.k, 1 AS which, l.run_id, l.generation, l.request_hash, l.state FROM v CROSS JOIN LATERAL" +
		"   (SELECT run_id, generation, request_hash, state FROM " + names.Run + " r WHERE r.namespace = v.namespace" +
		"    AND r.workflow_id = v.workflow_id AND r.request_id = v.request_id LIMIT 1) l" +
		"  UNION ALL SELECT v.k, 2, l.run_id, l.generation, NULL, l.state FROM v CROSS JOIN LATERAL" +
		"   (SELECT run_id, generation, state FROM " + names.Run + " r WHERE r.namespace = v.namespace AND r.workflow_id = v.workflow_id" +
		"    AND r.state = 'running' LIMIT 1) l" +
		"  UNION ALL SELECT v.k, 3, l.run_id, l.generation, NULL, l.state FROM v CROSS JOIN LATERAL" +
		"   (SELECT run_id, generation, state FROM " + names.Run + " r WHERE r.namespace = v.namespace AND r.workflow_id = v.workflow_id" +
		"    ORDER BY generation DESC LIMIT 1) l)," +
		" ok AS (SELECT * FROM v WHERE v.insert AND NOT EXISTS (SELECT 1 FROM found f" +
		"  WHERE f.k = v.k AND (f.which < 3 OR v.reject_any OR (v.reject_completed AND f.state = 'completed'))))," +
		startWorkflowSQL(names, "namespace, workflow_id", "namespace, workflow_id, ") +
		" jobs AS (INSERT INTO " + names.RiverJob + " AS j " + startTaskColumns +
		"  SELECT " + startTaskValuesSQL("ok.run_id", "ok.workflow_id", "ok.namespace", "ok.kind", "ok.queue") + " FROM ok WHERE ok.queue_task" +
		"  RETURNING j.id, (j.args->>'run_id')::uuid AS run_id)," +
		" inserted AS (INSERT INTO " + names.Run + startRunColumns +
		"  SELECT ok.run_id, ok.namespace, ok.workflow_id, g.last_generation, ok.kind, ok.queue, ok.args, ok.request_id, ok.request_hash," +
		"   " + deadlineSQL("ok.run_timeout") + ", " + deadlineSQL("ok.execution_timeout") + "," +
		"   ok.trace_context::jsonb, coalesce(jobs.id, ok.task_job_id), coalesce(ok.created_at, now()), greatest(ok.next_event_id, 1)" +
		"  FROM ok JOIN g ON g.namespace = ok.namespace AND g.workflow_id = ok.workflow_id LEFT JOIN jobs ON jobs.run_id = ok.run_id" +
		"  RETURNING " + startInsertedColumns + ")" +
		" SELECT f.k, " + startFoundRow +
		" UNION ALL SELECT ok.k, " + startInsertedRow + " JOIN ok ON ok.run_id = i.run_id"
}

// startOneSQL is startRunSQL for one start, over scalars (startOneArgs, in
// startRunArgs's order) and with the same rows (its start k is 1). Without
// arrays to unnest and join it has no join a generic plan could make
// quadratic, so it needs no dbschema.HashJoinsSQL around it, and Postgres
// runs it in about two thirds of the array statement's time: a start alone
// waits for it. Each lookup takes its run by key, as startRunSQL's do.
func startOneSQL(names *dbschema.Names) string {
	lookup := " FROM " + names.Run + " r WHERE r.namespace = $2::text AND r.workflow_id = $3::text"
	return "WITH found AS (" +
		"  (SELECT 1 AS which, run_id, generation, request_hash, state" + lookup + " AND r.request_id = $7::text LIMIT 1)" +
		"  UNION ALL (SELECT 2, run_id, generation, NULL, state" + lookup + " AND r.state = 'running' LIMIT 1)" +
		"  UNION ALL (SELECT 3, run_id, generation, NULL, state" + lookup + " ORDER BY generation DESC LIMIT 1))," +
		" ok AS (SELECT WHERE $12::boolean AND NOT EXISTS (SELECT 1 FROM found f" +
		"  WHERE f.which < 3 OR $10::boolean OR ($11::boolean AND f.state = 'completed')))," +
		startWorkflowSQL(names, "$2, $3", "") +
		" jobs AS (INSERT INTO " + names.RiverJob + " AS j " + startTaskColumns +
		"  SELECT " + startTaskValuesSQL("$1::uuid", "$3::text", "$2", "$4::text", "$5::text") + " FROM ok WHERE $18::boolean" +
		"  RETURNING j.id)," +
		" inserted AS (INSERT INTO " + names.Run + startRunColumns +
		"  SELECT $1, $2, $3, g.last_generation, $4, $5, $6::bytea, $7, $8::bytea," +
		"   " + deadlineSQL("$14::bigint") + ", " + deadlineSQL("$15::bigint") + "," +
		"   $9::text::jsonb, coalesce((SELECT id FROM jobs), $13::bigint), coalesce($16::timestamptz, now()), greatest($17::bigint, 1)" +
		"  FROM g" +
		"  RETURNING " + startInsertedColumns + ")" +
		" SELECT 1, " + startFoundRow +
		" UNION ALL SELECT 1, " + startInsertedRow
}

// The parts startRunSQL and startOneSQL share: the columns of a run's
// insert, of its first task's job and of what the insert returns, and the
// rows they read back after a start's k (readStartRuns).
const (
	startRunColumns = " (run_id, namespace, workflow_id, generation, kind, queue, args, request_id, request_hash, run_deadline," +
		" execution_deadline, trace_context, task_job_id, created_at, next_event_id)"
	startTaskColumns     = "(args, kind, max_attempts, queue, state, priority, metadata, tags)"
	startInsertedColumns = "run_id, generation, run_deadline, execution_deadline, created_at"
	startFoundRow        = "f.which, f.run_id, f.generation, f.request_hash, f.state, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz FROM found f"
	startInsertedRow     = "0, i.run_id, i.generation, NULL, 'running', i.run_deadline, i.execution_deadline, i.created_at FROM inserted i"
)

// startWorkflowSQL is the CTE g of a start's statement: the workflow IDs of
// ok, the starts that insert, given as their SQL expressions, get their
// next generation (1 for a new one), returned after returning (empty, or
// a list ending in ", ").
func startWorkflowSQL(names *dbschema.Names, ids, returning string) string {
	return " g AS (INSERT INTO " + names.Workflow + " AS w (namespace, workflow_id, last_generation)" +
		"  SELECT " + ids + ", 1 FROM ok" +
		"  ON CONFLICT (namespace, workflow_id) DO UPDATE SET last_generation = w.last_generation + 1" +
		"  RETURNING " + returning + "last_generation),"
}

// startTaskValuesSQL is the values of a start's first task's River job,
// as River's insert would make it (available now, default priority, no
// metadata, tags or uniqueness; its kind task.Kind's, its args task.Args's
// JSON), of the SQL expressions of the run's ID, workflow ID, namespace,
// workflow kind and queue.
func startTaskValuesSQL(runID, workflowID, namespace, kind, queue string) string {
	return "jsonb_build_object('run_id', " + runID + ", 'workflow_id', " + workflowID + "), " + taskKindSQL(namespace, kind) + ", " +
		strconv.Itoa(task.MaxAttempts) + ", " + queue + ", 'available', 1, '{}', '{}'"
}

// deadlineSQL is a run's deadline from now of the SQL expression of its
// timeout in microseconds, NULL for 0.
func deadlineSQL(micros string) string {
	return "now() + nullif(" + micros + ", 0) * interval '1 microsecond'"
}

// taskKindSQL is the SQL expression of task.Kind(namespace, kind), of the
// SQL expressions of a run's namespace and workflow kind.
func taskKindSQL(namespace, kind string) string {
	return "'" + task.KindPrefix + "' || " + namespace + " || '/' || " + kind
}
