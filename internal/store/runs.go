package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/weirhq/weir/internal/array"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/engine"
	"github.com/weirhq/weir/internal/history"
)

// A workflow step writes, in its last batch, the kinds an
// engine.StepWrites holds. A group of steps (QueueSteps) writes each kind
// that more than one member holds as one statement over arrays, which
// checks what the members' statements checked (a merged CAS's count must
// be every member's), since Postgres's costs are mostly per statement
// (docs/decisions/0013-step-committer.md).

// ErrRunMoved is the failure of a step's compare-and-swap (or guard): its
// run's append point moved, or the run closed, since the step read it.
var ErrRunMoved = errors.New("the run's append point moved under its step")

// runStatements are the run path's statements.
type runStatements struct {
	lock, lockMany, takeInbox, guard, clearTask, queriesWaiting string
	readInboxes, deleteInbox                                    string
	events, eventsMerged                                        string
	retire, retireMany, retireMerged                            string
	activity, activityMerged                                    string
	advance, advanceMerged, complete, completeMerged            string
	closeAs                                                     map[string]string // failed, cancelled, continued_as_new
	abandon, abandonMerged                                      string
	clearActivities                                             string
}

// runColumns are what runTargets reads of a run, then the database's time.
const runColumns = "namespace, workflow_id, generation, kind, queue, state, args, next_event_id, task_job_id, trace_context," +
	" parent_run_id IS NOT NULL, now()"

// runCASWhere is the condition of a step's write to its run ($1): the run
// is live and its append point is still $2 (W4).
//
// closed_at IS NULL is state = 'running' (constraint weir_run_closed_at), in
// a form that no partial index's predicate matches. Written as state =
// 'running', the test let the planner, with the statistics of a young
// weir_run, take the row through weir_run_live_idx, filtering every live run
// by run_id, instead of by primary key.
const runCASWhere = " WHERE run_id = $1 AND next_event_id = $2 AND closed_at IS NULL"

func newRunStatements(n *dbschema.Names) runStatements {
	const setNext = "next_event_id = $3, updated_at = now(), "
	closed := func(set string) string {
		return casSQL("UPDATE " + n.Run + " SET " + setNext + set + ", closed_at = now(), task_job_id = NULL")
	}
	abandon := func(runs string) string {
		return "WITH done AS (UPDATE " + n.Update + " SET state = 'rejected', failure = $2, completed_at = now()" +
			" WHERE " + runs + " AND state = 'requested' RETURNING run_id, update_id)" +
			" SELECT count(pg_notify($3, done.run_id::text || '/' || done.update_id)) FROM done"
	}
	activityColumns := "INSERT INTO " + n.Activity + " (run_id, scheduled_event_id, job_id, kind, deadline)"
	return runStatements{
		lock:     "SELECT " + runColumns + " FROM " + n.Run + " WHERE run_id = $1 FOR UPDATE",
		lockMany: "SELECT run_id, " + runColumns + " FROM " + n.Run + " WHERE run_id = ANY($1) ORDER BY run_id FOR UPDATE",
		takeInbox: "DELETE FROM " + n.Inbox + " WHERE run_id = $1" +
			" AND EXISTS (SELECT 1 FROM " + n.Run + " WHERE run_id = $1 AND closed_at IS NULL)" + // by primary key, as the CAS
			" RETURNING id, type, attributes, created_at",
		readInboxes: "SELECT run_id, id, type, attributes, created_at FROM " + n.Inbox + " WHERE run_id = ANY($1) ORDER BY id",
		deleteInbox: "DELETE FROM " + n.Inbox + " WHERE id = ANY($1)",
		guard: "WITH r AS (SELECT 1 FROM " + n.Run +
			" WHERE run_id = $1 AND next_event_id = $2 AND closed_at IS NULL AND task_job_id IS NULL FOR UPDATE)" +
			" SELECT 1 / count(*)::int FROM r",
		clearTask:      "UPDATE " + n.Run + " SET task_job_id = NULL WHERE run_id = $1 AND task_job_id = $2",
		queriesWaiting: "SELECT EXISTS (SELECT 1 FROM " + n.Query + " WHERE run_id = ANY($1) AND answered_at IS NULL)",
		events: "INSERT INTO " + n.Event + " (run_id, event_id, type, attributes, resolves_event_id, created_at, boundary)" +
			" SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[]::jsonb[], $5::bigint[], $6::timestamptz[], $7::text[]::jsonb[])",
		eventsMerged: "INSERT INTO " + n.Event + " (run_id, event_id, type, attributes, resolves_event_id, created_at, boundary)" +
			" SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::text[]::jsonb[], $5::bigint[], $6::timestamptz[], $7::text[]::jsonb[])",
		retire:     "DELETE FROM " + n.Activity + " WHERE run_id = $1 AND scheduled_event_id = $2",
		retireMany: "DELETE FROM " + n.Activity + " WHERE run_id = $1 AND scheduled_event_id = ANY($2)",
		// By key: the rows are restricted by run (run_id = ANY) before the
		// join, so that no plan scans the table.
		retireMerged: "DELETE FROM " + n.Activity + " a USING unnest($1::uuid[], $2::bigint[]) AS v(run_id, scheduled_event_id)" +
			" WHERE a.run_id = ANY($1) AND a.run_id = v.run_id AND a.scheduled_event_id = v.scheduled_event_id",
		activity:       activityColumns + " VALUES ($1, $2, $3, $4, $5)",
		activityMerged: activityColumns + " SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::text[], $5::timestamptz[])",
		advance: casSQL("UPDATE " + n.Run + " SET " + setNext +
			"task_job_id = CASE WHEN task_job_id = $4 THEN NULL ELSE task_job_id END"),
		advanceMerged: mergedCASSQL(n, "clear bigint",
			"next_event_id = v.next, updated_at = now(), task_job_id = CASE WHEN r.task_job_id = v.clear THEN NULL ELSE r.task_job_id END"),
		complete: closed("state = 'completed', result = $4"),
		completeMerged: mergedCASSQL(n, "result bytea",
			"next_event_id = v.next, updated_at = now(), state = 'completed', result = v.result, closed_at = now(), task_job_id = NULL"),
		closeAs: map[string]string{
			"failed":           closed("state = 'failed', failure = $4"),
			"cancelled":        closed("state = 'cancelled', failure = $4"),
			"continued_as_new": closed("state = 'continued_as_new'"),
		},
		abandon:         abandon("run_id = $1"),
		abandonMerged:   abandon("run_id = ANY($1)"),
		clearActivities: "DELETE FROM " + n.Activity + " WHERE run_id = $1",
	}
}

// casSQL makes a run's write (an UPDATE of the run, $1 and $2 as in
// runCASWhere) its compare-and-swap: it divides by zero unless it wrote the
// run, so that it fails its batch, and a COMMIT queued behind it, there.
func casSQL(update string) string {
	return "WITH u AS (" + update + runCASWhere + " RETURNING 1) SELECT 1 / count(*)::int FROM u"
}

// mergedCASSQL is the CAS of many runs over arrays: of runs ($1), the
// append points found ($2) and the new ones ($3), then, when extra names a
// column and its type, an array of it ($4), and last the number of runs,
// every one of which the statement must write (set, v's columns at hand)
// or divide by zero. The runs are taken by key (run_id = ANY) before the
// join with the arrays, so that no plan scans the table; closed_at IS NULL,
// not state = 'running', as runCASWhere says why.
func mergedCASSQL(names *dbschema.Names, extra, set string) string {
	types, columns, count := "", "", "$4"
	if extra != "" {
		column, typ, _ := strings.Cut(extra, " ")
		types, columns, count = ", $4::"+typ+"[]", ", "+column, "$5"
	}
	return "WITH v AS (SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bigint[]" + types + ") AS v(run_id, found, next" + columns + "))," +
		" u AS (UPDATE " + names.Run + " r SET " + set + " FROM v" +
		"  WHERE r.run_id = ANY($1) AND r.run_id = v.run_id AND r.next_event_id = v.found AND r.closed_at IS NULL RETURNING 1)" +
		" SELECT 1 / (count(*) = " + count + ")::int FROM u"
}

// runTargets are the scan targets of runColumns.
func runTargets(run *engine.Run, now *time.Time) []any {
	return []any{&run.Namespace, &run.WorkflowID, &run.Generation, &run.Kind, &run.Queue, &run.State, &run.Args, &run.NextEventID,
		&run.TaskJobID, &run.TraceContext, &run.HasParent, now}
}

// QueueLockRun queues the lock and read of run runID's row, with the
// database's time; read gets them, or the error (pgx.ErrNoRows: no such run).
func (s *Store) QueueLockRun(batch *pgx.Batch, runID uuid.UUID, read func(run engine.Run, now time.Time, err error) error) {
	batch.Queue(s.runs.lock, runID).QueryRow(func(row pgx.Row) error {
		run := engine.Run{ID: runID}
		var now time.Time
		err := row.Scan(runTargets(&run, &now)...)
		return read(run, now, err)
	})
}

// QueueLockRuns queues the lock and read of the runs runIDs, in run ID order
// (the rows are locked as they leave the sort, so that groups never wait for
// each other in a cycle); read gets each run found. known, if not nil,
// gives by runIDs' index what the caller knows of a run's row (nil:
// nothing): a row whose workflow ID, args and trace are the same keeps
// those of known, without an allocation each, as it keeps the strings its
// runs share.
func (s *Store) QueueLockRuns(batch *pgx.Batch, runIDs []uuid.UUID, known func(i int) *engine.Run, read func(run engine.Run, now time.Time) error) {
	batch.Queue(s.runs.lockMany, array.UUIDs(runIDs)).Query(func(rows pgx.Rows) error {
		var (
			run     engine.Run
			now     time.Time
			id      pgtype.UUID                                     // uuid.UUID goes through database/sql's Scanner, as text
			targets = append([]any{&id}, runTargets(&run, &now)...) // one set for every row
		)
		for i, t := range targets {
			switch t {
			case &run.Namespace, &run.Kind, &run.Queue, &run.State, &run.WorkflowID:
				targets[i] = sharedText{t.(*string)}
			case &run.Args, &run.TraceContext:
				targets[i] = sharedBytes{t.(*[]byte)}
			}
		}
		next := 0 // the index in runIDs of the next row's run, if it is there (rows come in run ID order)
		for rows.Next() {
			// Each row's values its own: none kept from the last but the
			// strings their row has too (sharedText), nor from known but
			// those the row has too.
			run = engine.Run{Namespace: run.Namespace, Kind: run.Kind, Queue: run.Queue, State: run.State}
			if k := knownAt(known, next, len(runIDs)); k != nil {
				run.WorkflowID, run.Args, run.TraceContext = k.WorkflowID, k.Args, k.TraceContext
			}
			if err := rows.Scan(targets...); err != nil {
				return err
			}
			run.ID = id.Bytes
			if i, ok := slices.BinarySearchFunc(runIDs, run.ID, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) }); ok {
				next = i + 1
			}
			if err := read(run, now); err != nil {
				return err
			}
		}
		return rows.Err()
	})
}

// knownAt is known(i), or nil if there is no such run or known is nil.
func knownAt(known func(i int) *engine.Run, i, n int) *engine.Run {
	if known == nil || i >= n {
		return nil
	}
	return known(i)
}

// sharedText is the scan target of a text column into a string that keeps
// the string it holds when the column has the same text: a group's runs
// mostly share their namespace, kind, queue and state, which then cost no
// allocation each.
type sharedText struct{ s *string }

func (t sharedText) ScanBytes(text []byte) error {
	switch {
	case text == nil:
		return fmt.Errorf("cannot scan NULL into %T", t.s)
	case string(text) != *t.s:
		*t.s = string(text)
	}
	return nil
}

// sharedBytes is the scan target of a bytea or jsonb column into a slice
// that keeps the slice it holds when the column has the same bytes (a
// copy otherwise, as pgx makes); its holders only read it.
type sharedBytes struct{ b *[]byte }

func (t sharedBytes) ScanBytes(src []byte) error {
	switch {
	case src == nil:
		*t.b = nil
	case *t.b == nil || !bytes.Equal(src, *t.b):
		*t.b = bytes.Clone(src)
	}
	return nil
}

// QueueTakeInbox queues the taking (deletion) of a live run's inbox; read
// gets the items taken, in arrival order. Queued after QueueLockRun, it runs
// once the lock is granted, with a snapshot of its own.
func (s *Store) QueueTakeInbox(batch *pgx.Batch, runID uuid.UUID, read func([]engine.InboxItem)) {
	batch.Queue(s.runs.takeInbox, runID).Query(func(rows pgx.Rows) error {
		taken, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (engine.InboxItem, error) {
			var item engine.InboxItem
			return item, row.Scan(inboxTargets(&item)...)
		})
		slices.SortFunc(taken, func(a, b engine.InboxItem) int { return int(a.ID - b.ID) })
		read(taken)
		return err
	})
}

// QueueReadInboxes queues the read of the inboxes of runs runIDs, locked
// before it in the batch (no item arrives while a run is locked); read
// gets each item, with its run, in arrival order. The step that takes the
// items deletes them with its writes (engine.StepWrites.Taken).
func (s *Store) QueueReadInboxes(batch *pgx.Batch, runIDs []uuid.UUID, read func(runID uuid.UUID, item engine.InboxItem)) {
	batch.Queue(s.runs.readInboxes, array.UUIDs(runIDs)).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var (
				runID uuid.UUID
				item  engine.InboxItem
			)
			if err := rows.Scan(append([]any{&runID}, inboxTargets(&item)...)...); err != nil {
				return err
			}
			read(runID, item)
		}
		return rows.Err()
	})
}

// inboxTargets are the scan targets of an inbox item's id, type, attributes
// and time, as eventstore.Load reads events: no second validation.
func inboxTargets(item *engine.InboxItem) []any {
	return []any{&item.ID, (*string)(&item.Event.Type), (*[]byte)(&item.Event.Attributes), &item.Event.Time}
}

// QueueGuard queues the lock of a run a step did not read under its lock
// (it took it from a cache) and the check that it is live at append point
// at with no task queued; a run that moved fails the batch (and its COMMIT)
// by a division by zero. The caller reads the check (pgx.QueuedQuery.QueryRow).
func (s *Store) QueueGuard(batch *pgx.Batch, runID uuid.UUID, at int64) *pgx.QueuedQuery {
	return batch.Queue(s.runs.guard, runID, at)
}

// ClearTask drops a run's reference to task job taskJobID, if it has it.
func (s *Store) ClearTask(ctx context.Context, db DBTX, runID uuid.UUID, taskJobID int64) error {
	return exec(ctx, db, s.runs.clearTask, runID, taskJobID)
}

// ClearActivities deletes the records of a run's pending activities.
func (s *Store) ClearActivities(ctx context.Context, db DBTX, runID uuid.UUID) error {
	return exec(ctx, db, s.runs.clearActivities, runID)
}

// QueueQueriesWaiting queues the check whether queries of any of the runs
// wait for an answer; read gets it.
func (s *Store) QueueQueriesWaiting(batch *pgx.Batch, runIDs []uuid.UUID, read func(waiting bool)) {
	batch.Queue(s.runs.queriesWaiting, array.UUIDs(runIDs)).QueryRow(func(row pgx.Row) error {
		var waiting bool
		if err := row.Scan(&waiting); err != nil {
			return err
		}
		read(waiting)
		return nil
	})
}

// IsMovedError reports whether err is a division by zero: a CAS or guard
// found its run moved.
func IsMovedError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.DivisionByZero
}

// checked reads a CAS's check: a division by zero is ErrRunMoved, said of
// what (a run, or a group's runs), worded only then.
func checked(q *pgx.QueuedQuery, what func() string) {
	q.QueryRow(func(row pgx.Row) error {
		var one int
		if err := row.Scan(&one); err != nil {
			if IsMovedError(err) {
				return fmt.Errorf("%s: %w: %w", what(), ErrRunMoved, err)
			}
			return err
		}
		return nil
	})
}

// QueueStep queues what one step writes, a statement per kind (per record
// of an activity), in this order: events, retirements, activity records,
// the rejection of pending updates, the CAS (whose check fails the batch if
// the run moved). The scalar forms let Postgres plan once per connection.
func (s *Store) QueueStep(batch *pgx.Batch, w *engine.StepWrites) { s.queueStep(batch, w, nil) }

// queueStep is QueueStep, its arrays lent by k (nil: new ones).
func (s *Store) queueStep(batch *pgx.Batch, w *engine.StepWrites, k *Arrays) {
	if len(w.Events) > 0 {
		a := newEventArrays(k, rows(w.Events))
		a.add(w.RunID, w.Events)
		batch.Queue(s.runs.events, w.RunID, a.ids, a.types, a.attributes, a.resolves, a.times, a.boundaries).
			Exec(func(pgconn.CommandTag) error { return nil })
	}
	switch len(w.Retired) {
	case 0:
	case 1:
		batch.Queue(s.runs.retire, w.RunID, w.Retired[0])
	default:
		batch.Queue(s.runs.retireMany, w.RunID, array.Int64s(w.Retired))
	}
	for _, a := range w.Activities {
		batch.Queue(s.runs.activity, w.RunID, a.ScheduledEventID, a.JobID, a.Kind, a.Deadline)
	}
	if len(w.Taken) > 0 {
		batch.Queue(s.runs.deleteInbox, array.Int64s(w.Taken))
	}
	if w.AbandonUpdates {
		s.queueAbandon(batch, s.runs.abandon, w.RunID)
	}
	if c := w.CAS; c != nil {
		var q *pgx.QueuedQuery
		switch {
		case c.Close == nil:
			q = batch.Queue(s.runs.advance, w.RunID, c.Found, c.Next, c.ClearTask)
		case c.Close.State == "completed":
			q = batch.Queue(s.runs.complete, w.RunID, c.Found, c.Next, c.Close.Result)
		case c.Close.State == "continued_as_new":
			q = batch.Queue(s.runs.closeAs[c.Close.State], w.RunID, c.Found, c.Next)
		default:
			q = batch.Queue(s.runs.closeAs[c.Close.State], w.RunID, c.Found, c.Next, c.Close.Failure)
		}
		checked(q, func() string { return "advancing run " + w.RunID.String() })
	}
}

func (s *Store) queueAbandon(batch *pgx.Batch, sql string, runs any) {
	batch.Queue(sql, runs, engine.AbandonedFailure, dbschema.Channel(s.names.Schema, dbschema.UpdateDoneChannel))
}

// QueueSteps queues what a group of steps writes (a member's StepWrites
// may be nil), in QueueStep's order: each kind that its members would
// write in more than one statement as one statement over arrays, with every
// member's rows; any other as QueueStep writes it. A CAS that clears a task
// job or closes the run otherwise than completing it is never merged. It
// reports whether it merged anything (the caller then asks for generic
// plans: Postgres plans a statement over arrays again on every call
// otherwise). The arrays are lent by k, which the caller resets once batch
// was sent.
func (s *Store) QueueSteps(batch *pgx.Batch, steps []*engine.StepWrites, k *Arrays) (merged bool) {
	casOf := func(merge func(c *engine.RunCAS) bool) func(w *engine.StepWrites) engine.StepWrites {
		return func(w *engine.StepWrites) engine.StepWrites {
			if w.CAS == nil || !merge(w.CAS) {
				return engine.StepWrites{}
			}
			return engine.StepWrites{RunID: w.RunID, CAS: w.CAS}
		}
	}
	// A member's part of a kind: its rows of that kind alone. A merge reads
	// only its kind's rows of the members it gets.
	kinds := []struct {
		part  func(w *engine.StepWrites) engine.StepWrites
		merge func(batch *pgx.Batch, ws []*engine.StepWrites, k *Arrays)
	}{
		{func(w *engine.StepWrites) engine.StepWrites {
			return engine.StepWrites{RunID: w.RunID, Events: w.Events}
		}, s.queueEventsMerged},
		{func(w *engine.StepWrites) engine.StepWrites {
			return engine.StepWrites{RunID: w.RunID, Retired: w.Retired}
		}, s.queueRetireMerged},
		{func(w *engine.StepWrites) engine.StepWrites {
			return engine.StepWrites{RunID: w.RunID, Activities: w.Activities}
		}, s.queueActivitiesMerged},
		{func(w *engine.StepWrites) engine.StepWrites {
			return engine.StepWrites{RunID: w.RunID, Taken: w.Taken}
		}, s.queueTakenMerged},
		{func(w *engine.StepWrites) engine.StepWrites {
			return engine.StepWrites{RunID: w.RunID, AbandonUpdates: w.AbandonUpdates}
		}, s.queueAbandonMerged},
		{casOf(func(c *engine.RunCAS) bool { return c.Close == nil }), s.queueCASMerged},
		{casOf(func(c *engine.RunCAS) bool { return c.Close != nil && c.Close.State == "completed" }), s.queueCASMerged},
		{casOf(func(c *engine.RunCAS) bool { return c.Close != nil && c.Close.State != "completed" }), nil},
	}
	ws := k.steps.take(len(steps)) // a kind's members that write it
	for _, kind := range kinds {
		ws = ws[:0]
		statements := 0
		for _, w := range steps {
			if w == nil {
				continue
			}
			if part := kind.part(w); stepStatements(&part) > 0 {
				ws, statements = append(ws, w), statements+stepStatements(&part)
			}
		}
		if statements < 2 || kind.merge == nil {
			for _, w := range ws {
				part := kind.part(w)
				s.queueStep(batch, &part, k)
			}
			continue
		}
		kind.merge(batch, ws, k)
		merged = true
	}
	return merged
}

// stepStatements is how many statements QueueStep queues for w.
func stepStatements(w *engine.StepWrites) int {
	n := len(w.Activities)
	for _, writes := range []bool{len(w.Events) > 0, len(w.Retired) > 0, len(w.Taken) > 0, w.AbandonUpdates, w.CAS != nil} {
		if writes {
			n++
		}
	}
	return n
}

// eventArrays are the columns of events rows, as arrays.
type eventArrays struct {
	runs       array.UUIDs
	ids        array.Int64s
	types      array.Texts
	attributes array.JSON
	resolves   array.NullInt64s // into resolved
	times      array.Times
	boundaries array.JSON // nil: NULL
	resolved   []int64
}

// newEventArrays returns arrays with room for n rows, lent by k (nil: new
// ones): rows are added up to n.
func newEventArrays(k *Arrays, n int) eventArrays {
	if k == nil {
		return eventArrays{runs: make(array.UUIDs, 0, n), ids: make(array.Int64s, 0, n), types: make(array.Texts, 0, n),
			attributes: make(array.JSON, 0, n), resolves: make(array.NullInt64s, 0, n), times: make(array.Times, 0, n),
			boundaries: make(array.JSON, 0, n), resolved: make([]int64, 0, n)}
	}
	return eventArrays{runs: k.uuids.take(n), ids: k.int64s.take(n), types: k.texts.take(n), attributes: k.bytes.take(n),
		resolves: k.nullInt64s.take(n), times: k.times.take(n), boundaries: k.bytes.take(n), resolved: k.int64s.take(n)}
}

// add adds the rows of a step's events (history.Rows), each with the
// event its outcome resolves, if any.
func (a *eventArrays) add(runID uuid.UUID, events []history.Event) {
	for r := range history.Rows(events) {
		var resolves *int64
		if engine.ResolvesEvent(r.Type) {
			if id, ok := engine.ResolvedBy(r.Event); ok {
				a.resolved = append(a.resolved, id) // within its room: what resolves point to stays
				resolves = &a.resolved[len(a.resolved)-1]
			}
		}
		a.runs = append(a.runs, runID)
		a.ids, a.types, a.attributes = append(a.ids, r.ID), append(a.types, string(r.Type)), append(a.attributes, r.Attributes)
		a.resolves, a.times, a.boundaries = append(a.resolves, resolves), append(a.times, r.Time), append(a.boundaries, r.Boundary)
	}
}

// rows is how many rows events are stored in (history.Rows).
func rows(events []history.Event) int {
	n := 0
	for range history.Rows(events) {
		n++
	}
	return n
}

func (s *Store) queueEventsMerged(batch *pgx.Batch, ws []*engine.StepWrites, k *Arrays) {
	n := 0
	for _, w := range ws {
		n += rows(w.Events)
	}
	a := newEventArrays(k, n)
	for _, w := range ws {
		a.add(w.RunID, w.Events)
	}
	batch.Queue(s.runs.eventsMerged, a.runs, a.ids, a.types, a.attributes, a.resolves, a.times, a.boundaries)
}

func (s *Store) queueRetireMerged(batch *pgx.Batch, ws []*engine.StepWrites, k *Arrays) {
	n := 0
	for _, w := range ws {
		n += len(w.Retired)
	}
	runs, scheduled := k.uuids.take(n), k.int64s.take(n)
	for _, w := range ws {
		for _, id := range w.Retired {
			runs, scheduled = append(runs, w.RunID), append(scheduled, id)
		}
	}
	batch.Queue(s.runs.retireMerged, array.UUIDs(runs), array.Int64s(scheduled))
}

func (s *Store) queueActivitiesMerged(batch *pgx.Batch, ws []*engine.StepWrites, k *Arrays) {
	n := 0
	for _, w := range ws {
		n += len(w.Activities)
	}
	runs, scheduled, jobs := k.uuids.take(n), k.int64s.take(n), k.int64s.take(n)
	kinds, deadlines := k.texts.take(n), k.nullTimes.take(n)
	for _, w := range ws {
		for _, a := range w.Activities {
			runs, scheduled, jobs = append(runs, w.RunID), append(scheduled, a.ScheduledEventID), append(jobs, a.JobID)
			kinds, deadlines = append(kinds, a.Kind), append(deadlines, a.Deadline)
		}
	}
	batch.Queue(s.runs.activityMerged, array.UUIDs(runs), array.Int64s(scheduled), array.Int64s(jobs), array.Texts(kinds), array.NullTimes(deadlines))
}

func (s *Store) queueTakenMerged(batch *pgx.Batch, ws []*engine.StepWrites, k *Arrays) {
	n := 0
	for _, w := range ws {
		n += len(w.Taken)
	}
	ids := k.int64s.take(n)
	for _, w := range ws {
		ids = append(ids, w.Taken...)
	}
	batch.Queue(s.runs.deleteInbox, array.Int64s(ids))
}

func (s *Store) queueAbandonMerged(batch *pgx.Batch, ws []*engine.StepWrites, k *Arrays) {
	runs := k.uuids.take(len(ws))
	for _, w := range ws {
		if w.AbandonUpdates {
			runs = append(runs, w.RunID)
		}
	}
	s.queueAbandon(batch, s.runs.abandonMerged, array.UUIDs(runs))
}

// queueCASMerged queues the CAS of runs that all continue (each clearing
// its task job, if it names one), or all complete.
func (s *Store) queueCASMerged(batch *pgx.Batch, ws []*engine.StepWrites, k *Arrays) {
	n := len(ws)
	runs, found, next, clear := array.UUIDs(k.uuids.take(n)), array.Int64s(k.int64s.take(n)), array.Int64s(k.int64s.take(n)), array.Int64s(k.int64s.take(n))
	completing := ws[0].CAS.Close != nil
	var results array.Bytes
	if completing {
		results = k.bytes.take(n)
	}
	for _, w := range ws {
		runs, found, next, clear = append(runs, w.RunID), append(found, w.CAS.Found), append(next, w.CAS.Next), append(clear, w.CAS.ClearTask)
		if completing {
			results = append(results, w.CAS.Close.Result)
		}
	}
	if !completing {
		checked(batch.Queue(s.runs.advanceMerged, runs, found, next, clear, len(runs)), func() string { return fmt.Sprintf("advancing %d runs in a group", len(runs)) })
		return
	}
	checked(batch.Queue(s.runs.completeMerged, runs, found, next, results, len(runs)), func() string { return fmt.Sprintf("completing %d runs in a group", len(runs)) })
}
