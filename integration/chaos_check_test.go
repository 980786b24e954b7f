package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/integration/chaos"
	"github.com/weirhq/weir/internal/dbschema"
)

func (h *harness) names() *dbschema.Names { return dbschema.New(chaosSchema) }

// report is what the invariant checker found after a scenario.
type report struct {
	Workflows    int // started
	Completed    int // completed with the right result
	Activities   int // activity outcomes in history
	Faults       int
	FaultKinds   string
	Recovered    int   // attempts ended by another attempt or the reaper
	Rejected     int64 // stale writes rejected (fencing counters of all workers)
	Expired      int64
	LeasesLost   int64
	ReExecuted   int // extra executions of plain (at-least-once) steps
	Duplicates   int // must be 0
	Lost         int // must be 0
	Violations   []string
	Elapsed      time.Duration
	StaleEffect  int // must be 0
	NullOutcomes int // activity outcomes with a null result (a W7 violation)
	Signals      int // signals in history
	Fenced       int // stale effect attempts whose CompleteTx was refused
	CommitFailed int // effect attempts whose COMMIT reported an error
}

func (r *report) violate(invariant string, n int, format string, args ...any) {
	if n > 0 {
		r.Violations = append(r.Violations, fmt.Sprintf("%s: %d %s", invariant, n, fmt.Sprintf(format, args...)))
	}
}

// check runs the invariant checker over the scenario's database. workflows
// is how many distinct chaos workflows were started, steps their size.
func (h *harness) check(ctx context.Context, workflows, steps int) *report {
	h.t.Helper()
	r := h.checkWith(ctx, h.pool, workflows, steps)
	r.violate("W7", h.awaitResults(ctx, workflows, strconv.Itoa(chaos.Expected(steps)+chaos.SignalSum(h.signals))), "results read through client.GetResult wrong or failed")
	return r
}

// querier is a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// checkWith is check's database part, reading through q.
func (h *harness) checkWith(ctx context.Context, q querier, workflows, steps int) *report {
	t := h.t
	t.Helper()
	n, tb := h.names(), h.tables
	r := &report{Workflows: workflows}
	r.Faults, r.FaultKinds = h.faultCount()
	count := func(query string, args ...any) int {
		t.Helper()
		var c int
		require.NoError(t, q.QueryRow(ctx, query, args...).Scan(&c), query)
		return c
	}
	expected := strconv.Itoa(chaos.Expected(steps) + chaos.SignalSum(h.signals))

	// This suite's activities never return null: a null outcome is the
	// signature of an activity resolved without its result (the bug
	// TestCompleteTxWhoseCommitFailsIsRetried guards against).
	nullOutcome := "SELECT e.run_id, e.resolves_event_id FROM " + n.History + " e WHERE e.type = 'ActivityCompleted' AND e.attributes->'result' = 'null'::jsonb"
	r.NullOutcomes = count("SELECT count(*) FROM (" + nullOutcome + ") b")
	r.violate("W7", r.NullOutcomes, "activity outcomes with a null result")

	// W7: every workflow terminal with the right result.
	r.Completed = count("SELECT count(DISTINCT workflow_id) FROM "+n.Run+
		" WHERE kind = 'chaos_workflow' AND state = 'completed' AND convert_from(result, 'UTF8') = $1", expected)
	r.Lost = workflows - r.Completed
	r.violate("W7", r.Lost, "workflows not completed with result %s", expected)
	r.violate("W7", count("SELECT count(*) FROM "+n.Run+" WHERE kind = 'chaos_workflow' AND state = 'completed' AND convert_from(result, 'UTF8') <> $1", expected),
		"completed runs with a wrong result")

	// W1/W2: each workflow was started once (retries reuse the request ID):
	// one run per workflow ID, never two live.
	r.violate("W1", count("SELECT count(*) FROM (SELECT 1 FROM "+n.Run+" GROUP BY namespace, workflow_id HAVING count(*) FILTER (WHERE state = 'running') > 1) d"),
		"workflow IDs with more than one live run")
	r.violate("W2", count("SELECT count(*) FROM (SELECT 1 FROM "+n.Run+" WHERE kind = 'chaos_workflow' GROUP BY namespace, workflow_id HAVING count(*) > 1) d"),
		"workflow IDs with more than one run")

	// W4: histories gap-free, from 1, up to the append point.
	r.violate("W4", count("SELECT count(*) FROM (SELECT 1 FROM "+n.History+" e JOIN "+n.Run+" r USING (run_id)"+
		" GROUP BY e.run_id, r.next_event_id HAVING min(e.event_id) <> 1 OR max(e.event_id) <> count(*) OR r.next_event_id <> max(e.event_id) + 1) g"),
		"runs whose history has a gap or does not end at next_event_id")

	// W5: each activity outcome at most once; exactly steps outcomes and one
	// WorkflowCompleted per completed run.
	outcomeDup := count("SELECT count(*) FROM (SELECT 1 FROM " + n.History + " WHERE resolves_event_id IS NOT NULL GROUP BY run_id, resolves_event_id HAVING count(*) > 1) d")
	r.Duplicates += outcomeDup
	r.violate("W5", outcomeDup, "activity outcomes entered history more than once")
	r.violate("W5", count("SELECT count(*) FROM (SELECT 1 FROM "+n.Run+" r LEFT JOIN "+n.History+" e ON e.run_id = r.run_id AND e.type = 'ActivityCompleted'"+
		" WHERE r.kind = 'chaos_workflow' AND r.state = 'completed' GROUP BY r.run_id HAVING count(e.event_id) <> $1) d", steps),
		"completed runs without exactly %d ActivityCompleted events", steps)
	r.violate("W5", count("SELECT count(*) FROM (SELECT 1 FROM "+n.Run+" r LEFT JOIN "+n.History+" e ON e.run_id = r.run_id AND e.type = 'WorkflowCompleted'"+
		" WHERE r.kind = 'chaos_workflow' AND r.state = 'completed' GROUP BY r.run_id HAVING count(e.event_id) <> 1) d"),
		"completed runs without exactly one WorkflowCompleted event")
	// W7: no signal dropped, none delivered twice (retries reuse the request
	// ID).
	r.violate("W7", count("SELECT count(*) FROM (SELECT 1 FROM "+n.Run+" r LEFT JOIN "+n.History+" e ON e.run_id = r.run_id AND e.type = 'SignalReceived'"+
		" WHERE r.kind = 'chaos_workflow' AND r.state = 'completed' GROUP BY r.run_id HAVING count(e.event_id) <> $1) d", h.signals),
		"completed runs without exactly %d SignalReceived events", h.signals)
	r.Signals = count("SELECT count(*) FROM " + n.History + " WHERE type = 'SignalReceived'")
	r.Activities = count("SELECT count(*) FROM " + n.History + " WHERE type = 'ActivityCompleted'")

	// F2: every effect step's effect committed exactly once.
	effectSteps := 0
	for step := 1; step <= steps; step++ {
		if chaos.IsEffect(step) {
			effectSteps++
		}
	}
	effectDup := count("SELECT coalesce(sum(c - 1), 0) FROM (SELECT count(*) c FROM " + tb.Effect + " GROUP BY workflow_id, step HAVING count(*) > 1) d")
	r.Duplicates += effectDup
	r.violate("F2", effectDup, "effects committed more than once")
	r.violate("F2", workflows*effectSteps-count("SELECT count(*) FROM (SELECT DISTINCT workflow_id, step FROM "+tb.Effect+") d"),
		"effect steps whose effect never committed")

	// F1: an effect commits only with its own attempt's outcome: the
	// attempt that wrote it is the one history recorded as completing it,
	// for the job that carries that very activity of that very run (W3).
	r.StaleEffect = count("SELECT count(*) FROM " + tb.Effect + " x WHERE NOT EXISTS (SELECT 1 FROM " + n.History + " e JOIN " + n.RiverJob + " j ON j.id = x.job_id" +
		" WHERE e.run_id = x.run_id AND e.resolves_event_id = x.scheduled_event_id AND e.type = 'ActivityCompleted'" +
		" AND (e.attributes->>'attempt')::int = x.attempt AND j.state = 'completed' AND j.attempt = x.attempt AND j.kind = 'chaos_effect'" +
		" AND (j.args->>'step')::int = x.step AND j.args->>'workflow_id' = x.workflow_id)")
	r.violate("F1", r.StaleEffect, "effects committed by an attempt other than the one history recorded")
	// F1: no job finalized twice (a stale completion applied after a newer
	// attempt's), per the fencing attempt log and, for the attempt that
	// finalized a job and was not logged, the job's row (fencing 003).
	log := n.Schema + ".weir_job_attempt"
	r.violate("F1", count("SELECT count(*) FROM (SELECT job_id FROM ("+
		" SELECT job_id FROM "+log+" WHERE outcome IN ('completed', 'discarded', 'cancelled')"+
		" UNION ALL SELECT j.id FROM "+n.RiverJob+" j WHERE j.state IN ('completed', 'discarded', 'cancelled') AND j.attempt > 0"+
		" AND j.attempted_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM "+log+" a"+
		" WHERE a.job_id = j.id AND a.attempt = j.attempt AND a.started_at = j.attempted_at)"+
		") f GROUP BY job_id HAVING count(*) > 1) d"),
		"jobs finalized more than once")
	// At least once: every plain step's recorded outcome was executed by
	// that attempt.
	r.violate("W5", count("SELECT count(*) FROM "+n.History+" e JOIN "+n.History+" s ON s.run_id = e.run_id AND s.event_id = e.resolves_event_id"+
		" WHERE e.type = 'ActivityCompleted' AND s.attributes->>'kind' = 'chaos_plain' AND NOT EXISTS (SELECT 1 FROM "+tb.Exec+" x"+
		" WHERE x.run_id = e.run_id AND x.scheduled_event_id = e.resolves_event_id AND x.attempt = (e.attributes->>'attempt')::int)"),
		"plain activity outcomes from an attempt that never ran")
	r.ReExecuted = count("SELECT count(*) - count(DISTINCT (workflow_id, step)) FROM " + tb.Exec)

	r.Fenced = count("SELECT count(*) FROM " + tb.Refused + " WHERE what = 'complete_tx_fenced'")
	r.CommitFailed = count("SELECT count(*) FROM " + tb.Refused + " WHERE what = 'commit_failed'")
	// F2 from the other side: an attempt told its CompleteTx was refused
	// must have left no effect.
	r.violate("F2", count("SELECT count(*) FROM "+tb.Refused+" f JOIN "+tb.Effect+" x USING (job_id, attempt) WHERE f.what = 'complete_tx_fenced'"),
		"effects committed by attempts whose CompleteTx was refused")
	r.Recovered = count("SELECT count(*) FROM " + n.Schema + ".weir_job_attempt WHERE outcome IN ('available', 'superseded')")
	require.NoError(t, q.QueryRow(ctx, "SELECT coalesce(sum(rejected), 0), coalesce(sum(expired), 0), coalesce(sum(lost), 0) FROM "+tb.Stats).
		Scan(&r.Rejected, &r.Expired, &r.LeasesLost))
	return r
}

// awaitResults reads every workflow's result through the client, returning
// how many were missing or wrong.
func (h *harness) awaitResults(ctx context.Context, workflows int, expected string) int {
	var bad int
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range workflows {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			getCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			desc, err := h.client.Describe(getCtx, workflowID(i), uuid.Nil)
			var got int
			if err == nil {
				got, err = client.GetResult[int](getCtx, h.client.GetRun(workflowID(i), desc.RunID))
			}
			if err != nil || strconv.Itoa(got) != expected {
				mu.Lock()
				bad++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return bad
}

// logTable prints the scenario's summary.
func (r *report) logTable(t *testing.T, scenario string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-12s %9s %9s %10s %7s %9s %9s %8s %10s %5s %s\n",
		"scenario", "workflows", "completed", "activities", "faults", "recovered", "rejected", "reexecs", "duplicates", "lost", "elapsed")
	fmt.Fprintf(&b, "%-12s %9d %9d %10d %7d %9d %9d %8d %10d %5d %s\n",
		scenario, r.Workflows, r.Completed, r.Activities, r.Faults, r.Recovered, r.Rejected, r.ReExecuted, r.Duplicates, r.Lost, r.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(&b, "faults:%s; signals=%d; leases expired=%d lost=%d; stale CompleteTx refused=%d; COMMIT errors=%d\n",
		r.FaultKinds, r.Signals, r.Expired, r.LeasesLost, r.Fenced, r.CommitFailed)
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "VIOLATION %s\n", v)
	}
	t.Log(b.String())
}

// TestChaosCheckerCatchesViolations proves the checker can fail: after a
// clean run it finds nothing, and each deliberate breakage of the database
// (in a transaction rolled back afterwards) is reported under its invariant.
func TestChaosCheckerCatchesViolations(t *testing.T) {
	ctx := t.Context()
	const workflows, steps = 6, 4
	h := newHarness(t, harnessOpts{workers: 1})
	h.began, h.rate = time.Now(), 1000
	h.startAll(ctx, workflows, func(i int) chaos.WorkflowArgs {
		return chaos.WorkflowArgs{ID: workflowID(i), Steps: steps, MaxSleepMillis: 5}
	})
	require.True(t, h.pollClosed(ctx, workflows, time.Minute))
	h.stopWorkers()
	clean := h.check(ctx, workflows, steps)
	require.Empty(t, clean.Violations)
	require.Equal(t, workflows, clean.Completed)

	n, tb := h.names(), h.tables
	run0 := "(SELECT run_id FROM " + n.Run + " WHERE workflow_id = 'chaos-0')"
	for _, tc := range []struct {
		name, invariant, sql string
	}{
		{"wrong result", "W7", "UPDATE " + n.Run + " SET result = '0' WHERE workflow_id = 'chaos-0'"},
		{"not terminal", "W7", "UPDATE " + n.Run + " SET state = 'running', closed_at = NULL WHERE workflow_id = 'chaos-0'"},
		{"second run", "W2", "INSERT INTO " + n.Run + " (run_id, namespace, workflow_id, generation, kind, queue, state, args, request_id, request_hash, closed_at)" +
			" SELECT gen_random_uuid(), namespace, workflow_id, 2, kind, queue, 'failed', args, 'other', request_hash, now() FROM " + n.Run + " WHERE workflow_id = 'chaos-0'"},
		{"history gap", "W4", "DELETE FROM " + n.Event + " WHERE run_id = " + run0 + // its second row, not its last
			" AND event_id = (SELECT min(event_id) FROM " + n.Event + " WHERE run_id = " + run0 + " AND event_id > 1)"},
		{"second outcome", "W5", "INSERT INTO " + n.Event + " (run_id, event_id, type, attributes)" +
			" SELECT run_id, max(event_id) + 1, 'ActivityCompleted', '{}' FROM " + n.History + " WHERE run_id = " + run0 + " GROUP BY run_id"},
		{"effect twice", "F2", "INSERT INTO " + tb.Effect + " (workflow_id, run_id, step, scheduled_event_id, job_id, attempt, worker)" +
			" SELECT workflow_id, run_id, step, scheduled_event_id, job_id, attempt, 'stale' FROM " + tb.Effect + " WHERE workflow_id = 'chaos-0' AND step = 1"},
		{"effect lost", "F2", "DELETE FROM " + tb.Effect + " WHERE workflow_id = 'chaos-0' AND step = 3"},
		{"stale effect", "F1", "UPDATE " + tb.Effect + " SET attempt = attempt + 1 WHERE workflow_id = 'chaos-0' AND step = 1"},
		{"finalized twice", "F1", "INSERT INTO " + n.Schema + ".weir_job_attempt (job_id, attempt, outcome)" +
			" SELECT job_id, attempt + 1, 'completed' FROM " + tb.Effect + " WHERE workflow_id = 'chaos-0' AND step = 1"},
		{"effect of a refused attempt", "F2", "INSERT INTO " + tb.Refused + " (workflow_id, step, job_id, attempt, worker, what, error)" +
			" SELECT workflow_id, step, job_id, attempt, worker, 'complete_tx_fenced', 'lease lost' FROM " + tb.Effect + " WHERE workflow_id = 'chaos-0' AND step = 1"},
		{"signal twice", "W7", "UPDATE " + n.Event + " SET type = 'SignalReceived' WHERE run_id = " + run0 + " AND type = 'TimerStarted'"},
		{"plain outcome never ran", "W5", "DELETE FROM " + tb.Exec + " WHERE workflow_id = 'chaos-0' AND step = 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := h.pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			tag, err := tx.Exec(ctx, tc.sql)
			require.NoError(t, err)
			require.Positive(t, tag.RowsAffected(), "the breakage changed nothing")
			broken := h.checkWith(ctx, tx, workflows, steps)
			require.NotEmpty(t, broken.Violations)
			found := false
			for _, v := range broken.Violations {
				found = found || strings.HasPrefix(v, tc.invariant+":")
			}
			require.True(t, found, "want a %s violation, got %q", tc.invariant, broken.Violations)
		})
	}
}

// logEvidence prints, for a few workflows the checker found wrong, what the
// database holds about them: run, history, effects and executions, and every
// attempt of their jobs.
func (h *harness) logEvidence(ctx context.Context, steps int) {
	t := h.t
	t.Helper()
	n, tb := h.names(), h.tables
	rows, err := h.pool.Query(ctx, "SELECT workflow_id FROM "+n.Run+" WHERE kind = 'chaos_workflow'"+
		" AND (state <> 'completed' OR convert_from(result, 'UTF8') <> $1)"+
		" UNION SELECT workflow_id FROM "+tb.Effect+" GROUP BY workflow_id, step HAVING count(*) > 1 LIMIT 3", strconv.Itoa(chaos.Expected(steps)+chaos.SignalSum(h.signals)))
	if err != nil {
		t.Logf("evidence: %v", err)
		return
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Logf("evidence: %v", err)
		return
	}
	dump := func(title, query string, args ...any) {
		rows, err := h.pool.Query(ctx, "SELECT row_to_json(x)::text FROM ("+query+") x", args...)
		if err != nil {
			t.Logf("evidence %s: %v", title, err)
			return
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Logf("evidence %s: %v", title, err)
			return
		}
		t.Logf("%s:\n  %s", title, strings.Join(lines, "\n  "))
	}
	for _, id := range ids {
		dump("run "+id, "SELECT run_id, state, convert_from(result, 'UTF8') AS result, failure, next_event_id, task_job_id FROM "+n.Run+" WHERE workflow_id = $1", id)
		dump("history "+id, "SELECT e.event_id, e.type, e.resolves_event_id, left(e.attributes::text, 200) AS attributes, e.created_at FROM "+n.History+" e JOIN "+n.Run+" r USING (run_id)"+
			" WHERE r.workflow_id = $1 ORDER BY e.event_id", id)
		dump("effects "+id, "SELECT * FROM "+tb.Effect+" WHERE workflow_id = $1 ORDER BY id", id)
		dump("executions "+id, "SELECT * FROM "+tb.Exec+" WHERE workflow_id = $1 ORDER BY id", id)
		// Task and activity jobs name the workflow ID; timer jobs only the run.
		const ofWorkflow = " (j.args->>'workflow_id' = $1 OR j.args->>'run_id' IN (SELECT run_id::text FROM %s WHERE workflow_id = $1))"
		dump("jobs "+id, "SELECT j.id, j.kind, j.state, j.attempt, j.max_attempts, j.args, j.scheduled_at, j.lease_last_token,"+
			" left(j.errors::text, 600) AS errors, j.finalized_at FROM "+n.RiverJob+" j WHERE"+fmt.Sprintf(ofWorkflow, n.Run)+" ORDER BY j.id", id)
		dump("job attempts "+id, "SELECT a.* FROM "+n.Schema+".weir_job_attempt a JOIN "+n.RiverJob+" j ON j.id = a.job_id"+
			" WHERE"+fmt.Sprintf(ofWorkflow, n.Run)+" ORDER BY a.job_id, a.id", id)
		dump("inbox "+id, "SELECT i.* FROM "+n.Inbox+" i JOIN "+n.Run+" r USING (run_id) WHERE r.workflow_id = $1 ORDER BY i.id", id)
		dump("pending activities "+id, "SELECT a.* FROM "+n.Activity+" a JOIN "+n.Run+" r USING (run_id) WHERE r.workflow_id = $1", id)
	}
}
