package worker

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/fencingclaim"
	"github.com/weirhq/weir/internal/update"
)

// A group of outcomes (stepCommitter) sends its members' last writes in one
// batch. Written one member at a time, each kind of write is a statement
// per member, and Postgres pays a statement's fixed costs each time: the
// executor's start, and, for a table with CHECK constraints or a trigger
// with a WHEN, parsing those expressions again from their stored text (they
// are cached per statement, not per connection). Sampled with perf in a
// burst, that per-statement work was about a fifth of Postgres's CPU. So
// the kinds every plain continuation writes in the same shape are merged,
// for the whole group, into one statement over arrays: the events, the
// retirement of the activity whose outcome it is, and the run's
// compare-and-swap (a continuing run's, and a completing run's), a closing
// run's rejection of updates still pending, the records of the activities
// it schedules; and the claimed jobs' completions and the claims of the
// activities scheduled, which fencing merges (MergeQueuedCompletions,
// MergeQueuedClaims: a claim names its job by an ID the worker reserved,
// jobIDs). A merged statement checks what the members' statements
// checked (the CAS's count must be every member's), so a failure still
// fails the group, whose members then run again alone, one statement each.

// stepSQL holds the statements a workflow task writes in the shape the
// group merges (advance queues exactly these texts; mergeGroupWrites finds
// them by text), and their merged forms.
type stepSQL struct {
	// events appends a run's events: $1 run, then arrays of event ID,
	// type, attributes, resolved event and time.
	events       string
	eventsMerged string // the same with an array of runs first
	// eventsFolded and eventsFoldedMerged are events and eventsMerged with
	// one more array: the boundary folded into each row (NULL for none;
	// history.Row).
	eventsFolded       string
	eventsFoldedMerged string
	// retireOne retires one activity of a run ($1, $2).
	retireOne       string
	retireOneMerged string
	// advance is the CAS of a continuing run ($1 run, $2 the append point
	// found, $3 the new one, $4 the task job to clear, 0 for none), dividing
	// by zero unless it wrote the run.
	advance       string
	advanceMerged string
	// complete is the CAS of a run that completes ($4 its result); its
	// merged form takes an array of results.
	complete       string
	completeMerged string
	// abandon rejects a closing run's pending updates (internal/update).
	abandon       string
	abandonMerged string
	// activity records a pending activity: $1 run, $2 its ActivityScheduled
	// event, $3 its job, $4 its kind, $5 its deadline (NULL for none).
	activity       string
	activityMerged string
}

func newStepSQL(names *dbschema.Names) stepSQL {
	return stepSQL{
		events:             insertEventsSQL(names, false, false),
		eventsMerged:       insertEventsSQL(names, true, false),
		eventsFolded:       insertEventsSQL(names, false, true),
		eventsFoldedMerged: insertEventsSQL(names, true, true),
		retireOne:          "DELETE FROM " + names.Activity + " WHERE run_id = $1 AND scheduled_event_id = $2",
		// By key: the rows are restricted by run (run_id = ANY) before the
		// join, so that no plan scans the table.
		retireOneMerged: "DELETE FROM " + names.Activity + " a USING unnest($1::uuid[], $2::bigint[]) AS v(run_id, scheduled_event_id)" +
			" WHERE a.run_id = ANY($1) AND a.run_id = v.run_id AND a.scheduled_event_id = v.scheduled_event_id",
		advance: casSQL("UPDATE " + names.Run + " SET next_event_id = $3, updated_at = now(), " +
			"task_job_id = CASE WHEN task_job_id = $4 THEN NULL ELSE task_job_id END"),
		// Members continue runs with no task queued ($4 = 0 for each, which
		// leaves task_job_id as it is): only those are merged.
		advanceMerged: mergedCASSQL(names, "", "next_event_id = v.next, updated_at = now()"),
		complete: casSQL("UPDATE " + names.Run + " SET next_event_id = $3, updated_at = now(), " +
			"state = 'completed', result = $4, closed_at = now(), task_job_id = NULL"),
		completeMerged: mergedCASSQL(names, "result bytea",
			"next_event_id = v.next, updated_at = now(), state = 'completed', result = v.result, closed_at = now(), task_job_id = NULL"),
		abandon:       update.AbandonPendingSQL(names, false),
		abandonMerged: update.AbandonPendingSQL(names, true),
		activity: "INSERT INTO " + names.Activity + " (run_id, scheduled_event_id, job_id, kind, deadline)" +
			" VALUES ($1, $2, $3, $4, $5)",
		activityMerged: "INSERT INTO " + names.Activity + " (run_id, scheduled_event_id, job_id, kind, deadline)" +
			" SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::text[], $5::timestamptz[])",
	}
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

// casSQL makes a run's write (an UPDATE of the run, $1 and $2 as in
// runCASWhere) its compare-and-swap: it divides by zero unless it wrote the
// run, so that it fails its batch, and a COMMIT queued behind it, there.
func casSQL(update string) string {
	return "WITH u AS (" + update + runCASWhere + " RETURNING 1) SELECT 1 / count(*)::int FROM u"
}

// insertEventsSQL is the INSERT of events from arrays of event ID, type,
// attributes, resolved event and time, after $1: the run (merged: an array
// of runs, one per event); folded adds an array of boundaries (NULL for a
// row without one; history.Row).
func insertEventsSQL(names *dbschema.Names, merged, folded bool) string {
	columns, arrays := "", ""
	if folded {
		columns, arrays = ", boundary", ", $7::text[]::jsonb[]"
	}
	run, runs := "$1, ", ""
	if merged {
		run, runs = "", "$1::uuid[], "
	}
	return "INSERT INTO " + names.Event + " (run_id, event_id, type, attributes, resolves_event_id, created_at" + columns + ")" +
		" SELECT " + run + "* FROM unnest(" + runs + "$2::bigint[], $3::text[], $4::text[]::jsonb[], $5::bigint[], $6::timestamptz[]" + arrays + ")"
}

// mergeGroupWrites rewrites batch, the last writes of a group's members in
// turn, so that each kind stepSQL merges is one statement for the whole
// group, in the place of its first occurrence; everything else stays as it
// was, in order. A kind that occurs once is left as it is. It reports
// whether it merged anything.
func (w *Worker) mergeGroupWrites(batch *pgx.Batch) bool {
	var events, retire, advance, complete, abandon, activities []int
	folded := false // a member's events hold a boundary column
	for i, qq := range batch.QueuedQueries {
		switch qq.SQL {
		case w.sql.activity:
			activities = append(activities, i)
		case w.sql.eventsFolded:
			folded = true
			events = append(events, i)
		case w.sql.events:
			events = append(events, i)
		case w.sql.retireOne:
			retire = append(retire, i)
		case w.sql.advance:
			if len(qq.Arguments) == 4 && qq.Arguments[3] == any(int64(0)) {
				advance = append(advance, i)
			}
		case w.sql.complete:
			complete = append(complete, i)
		case w.sql.abandon:
			// The same failure and channel for each (a closed run's).
			if len(abandon) == 0 || sameArgs(batch.QueuedQueries[abandon[0]].Arguments[1:], qq.Arguments[1:]) {
				abandon = append(abandon, i)
			}
		}
	}
	merged := map[int]*pgx.QueuedQuery{} // at the first occurrence
	drop := map[int]bool{}
	if len(events) > 1 {
		var (
			runs       []uuid.UUID
			ids        []int64
			types      []string
			attributes []string
			resolves   []*int64
			times      []time.Time
			boundaries []*string // only if folded
		)
		for _, i := range events {
			q := batch.QueuedQueries[i]
			a := q.Arguments
			runID, eventIDs := a[0].(uuid.UUID), a[1].([]int64)
			for range eventIDs {
				runs = append(runs, runID)
			}
			ids = append(ids, eventIDs...)
			types = append(types, a[2].([]string)...)
			attributes = append(attributes, a[3].([]string)...)
			resolves = append(resolves, a[4].([]*int64)...)
			times = append(times, a[5].([]time.Time)...)
			switch {
			case !folded:
			case q.SQL == w.sql.eventsFolded:
				boundaries = append(boundaries, a[6].([]*string)...)
			default:
				boundaries = append(boundaries, make([]*string, len(eventIDs))...)
			}
		}
		if folded {
			merged[events[0]] = &pgx.QueuedQuery{SQL: w.sql.eventsFoldedMerged, Arguments: []any{runs, ids, types, attributes, resolves, times, boundaries}}
		} else {
			merged[events[0]] = &pgx.QueuedQuery{SQL: w.sql.eventsMerged, Arguments: []any{runs, ids, types, attributes, resolves, times}}
		}
		markDropped(drop, events)
	}
	if len(retire) > 1 {
		runs := make([]uuid.UUID, len(retire))
		scheduled := make([]int64, len(retire))
		for k, i := range retire {
			a := batch.QueuedQueries[i].Arguments
			runs[k], scheduled[k] = a[0].(uuid.UUID), a[1].(int64)
		}
		merged[retire[0]] = &pgx.QueuedQuery{SQL: w.sql.retireOneMerged, Arguments: []any{runs, scheduled}}
		markDropped(drop, retire)
	}
	if len(advance) > 1 {
		runs := make([]uuid.UUID, len(advance))
		found := make([]int64, len(advance))
		next := make([]int64, len(advance))
		for k, i := range advance {
			a := batch.QueuedQueries[i].Arguments
			runs[k], found[k], next[k] = a[0].(uuid.UUID), a[1].(int64), a[2].(int64)
		}
		merged[advance[0]] = casChecked(&pgx.QueuedQuery{SQL: w.sql.advanceMerged, Arguments: []any{runs, found, next, len(runs)}}, "advancing", len(runs))
		markDropped(drop, advance)
	}
	if len(complete) > 1 {
		runs := make([]uuid.UUID, len(complete))
		found := make([]int64, len(complete))
		next := make([]int64, len(complete))
		results := make([][]byte, len(complete))
		for k, i := range complete {
			a := batch.QueuedQueries[i].Arguments
			runs[k], found[k], next[k], results[k] = a[0].(uuid.UUID), a[1].(int64), a[2].(int64), a[3].([]byte)
		}
		merged[complete[0]] = casChecked(&pgx.QueuedQuery{SQL: w.sql.completeMerged, Arguments: []any{runs, found, next, results, len(runs)}}, "completing", len(runs))
		markDropped(drop, complete)
	}
	if len(abandon) > 1 {
		runs := make([]uuid.UUID, len(abandon))
		for k, i := range abandon {
			runs[k] = batch.QueuedQueries[i].Arguments[0].(uuid.UUID)
		}
		first := batch.QueuedQueries[abandon[0]].Arguments
		merged[abandon[0]] = &pgx.QueuedQuery{SQL: w.sql.abandonMerged, Arguments: []any{runs, first[1], first[2]}}
		markDropped(drop, abandon)
	}
	if len(activities) > 1 {
		var (
			runs      = make([]uuid.UUID, len(activities))
			scheduled = make([]int64, len(activities))
			jobs      = make([]int64, len(activities))
			kinds     = make([]string, len(activities))
			deadlines = make([]*time.Time, len(activities))
		)
		for k, i := range activities {
			a := batch.QueuedQueries[i].Arguments
			runs[k], scheduled[k], jobs[k], kinds[k], deadlines[k] = a[0].(uuid.UUID), a[1].(int64), a[2].(int64), a[3].(string), a[4].(*time.Time)
		}
		merged[activities[0]] = &pgx.QueuedQuery{SQL: w.sql.activityMerged, Arguments: []any{runs, scheduled, jobs, kinds, deadlines}}
		markDropped(drop, activities)
	}
	if len(merged) == 0 {
		return false
	}
	out := batch.QueuedQueries[:0:0]
	for i, qq := range batch.QueuedQueries {
		if q, ok := merged[i]; ok {
			out = append(out, q)
			continue
		}
		if !drop[i] {
			out = append(out, qq)
		}
	}
	batch.QueuedQueries = out
	return true
}

// mergeLastWrites merges the last writes of a group (of outcomes, or of
// first tasks in a group of starts): the kinds mergeGroupWrites merges, and
// the claimed jobs' completions and claims fencing merges; when anything
// merged, the batch asks for generic plans first, unless plansSet says its
// transaction asked already (dbschema.GenericPlansSQL lasts until the
// transaction ends).
func (w *Worker) mergeLastWrites(batch *pgx.Batch, plansSet bool) {
	merged := w.mergeGroupWrites(batch)
	if fencingclaim.For(w.driver).MergeQueuedCompletions(batch, w.config.Schema)+fencingclaim.For(w.driver).MergeQueuedClaims(batch, w.config.Schema) > 0 || merged {
		if !plansSet {
			preferGenericPlans(batch)
		}
	}
}

// preferGenericPlans puts dbschema.GenericPlansSQL at the head of batch: a
// group sends it ahead of its last writes when they hold a merged statement.
func preferGenericPlans(batch *pgx.Batch) {
	batch.QueuedQueries = append([]*pgx.QueuedQuery{{SQL: dbschema.GenericPlansSQL}}, batch.QueuedQueries...)
}

// casChecked reads a merged CAS's check: a division by zero means one of
// its runs moved (the group then runs each member again alone).
func casChecked(q *pgx.QueuedQuery, doing string, runs int) *pgx.QueuedQuery {
	q.QueryRow(func(row pgx.Row) error {
		var one int
		if err := row.Scan(&one); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.DivisionByZero {
				return fmt.Errorf("%s %d runs in a group: an append point moved under its task: %w", doing, runs, err)
			}
			return err
		}
		return nil
	})
	return q
}

// sameArgs reports whether two statements' arguments (a failure's JSON and
// a channel) are the same.
func sameArgs(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if xb, ok := x.([]byte); ok {
			yb, ok := y.([]byte)
			if !ok || !bytes.Equal(xb, yb) {
				return false
			}
			continue
		}
		if x != y {
			return false
		}
	}
	return true
}

func markDropped(drop map[int]bool, at []int) {
	for _, i := range at {
		drop[i] = true
	}
}
