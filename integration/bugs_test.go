package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/integration/chaos"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/worker"
)

// Regression tests: reductions of bugs the fault-injection suite found,
// each failing before its fix.

// TestLeaseNotLostByAttemptThatCompletedItsJob: with no fault at all, the
// fencing layer reports lost leases. Weir's activity and task workers
// finalize their job inside Work (a fenced CompleteTx); the attempt stays in
// the lease keeper until Work returns, and a heartbeat in that window finds
// the row no longer running with its token, so it counts LeasesLost, emits
// EventLeaseLost to the Observer and cancels the (finished) attempt's context
// with ErrLeaseLost. The counter, the metric and the trace event that should
// mean "a worker lost a job to recovery" fire on healthy completions.
// Fixed: the keeper sees the job completed with the attempt's own token
// (lease_last_token) and drops it without counting or cancelling.
func TestLeaseNotLostByAttemptThatCompletedItsJob(t *testing.T) {
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	tables := chaos.NewTables(schema)
	_, err := pool.Exec(ctx, tables.CreateSQL())
	require.NoError(t, err)

	// Heartbeats every 20 ms, so that one lands in the window between an
	// attempt's completion and its return from Work (the bug). The lease
	// outlives any pause of the test process under -race on a loaded
	// machine (a TTL of a few hundred ms need not): an expiry here means a
	// lease lost its renewals, not a slow scheduler.
	w, err := worker.New(pool, &worker.Config{
		Fencing: &fencing.Config{LeaseTTL: 3 * time.Second, HeartbeatInterval: 20 * time.Millisecond},
		Schema:  schema,
	})
	require.NoError(t, err)
	worker.AddWorkflow(w, &chaos.Workflow{})
	worker.AddActivity(w, &chaos.PlainActivity{Pool: pool, Tables: tables, Worker: "w0/0"})
	worker.AddActivity(w, &chaos.EffectActivity{Pool: pool, Tables: tables, Worker: "w0/0"})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
	})
	runAndAwait(ctx, t, pool, schema, 30)

	stats := w.FencingStats()
	t.Logf("fencing stats with no fault injected: %+v", stats)
	require.Zero(t, stats.LeasesExpired, "no lease can expire: nothing was paused or killed")
	require.Zero(t, stats.LeasesLost, "no attempt lost its job, yet leases were counted lost")
}

// runAndAwait starts n chaos workflows and awaits their results.
func runAndAwait(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, n int) {
	t.Helper()
	c, err := client.New(pool, &client.Config{PollInterval: 100 * time.Millisecond, Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	runs := make([]*client.Run, n)
	for i := range runs {
		runs[i], err = c.Start(ctx, chaos.WorkflowArgs{ID: fmt.Sprint(i), Steps: 4, MaxSleepMillis: 5}, nil)
		require.NoError(t, err)
	}
	for _, run := range runs {
		getCtx, cancel := context.WithTimeout(ctx, time.Minute)
		got, err := client.GetResult[int](getCtx, run)
		cancel()
		require.NoError(t, err)
		require.Equal(t, chaos.Expected(4), got)
	}
}

// commitProbe is an effect activity that remembers every Commit error that
// followed a successful activity.CompleteTx, with the effect's key.
type commitProbe struct {
	chaos.EffectActivity
	mu     sync.Mutex
	failed map[string]error // "workflow/step" → Commit's error
}

func (a *commitProbe) Execute(ctx context.Context, args chaos.EffectArgs) (int, error) {
	info, _ := activity.GetInfo(ctx)
	tx, err := a.Pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "INSERT INTO "+a.Tables.Effect+" (workflow_id, run_id, step, scheduled_event_id, job_id, attempt, worker) VALUES ($1, $2, $3, $4, $5, $6, 'probe')",
		info.WorkflowID, info.RunID, args.Step, info.ScheduledEventID, info.JobID, info.Attempt); err != nil {
		return 0, err
	}
	if err := activity.CompleteTx(ctx, tx, chaos.StepValue(args.Step)); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		a.mu.Lock()
		a.failed[fmt.Sprint(info.WorkflowID, "/", args.Step, "/", info.Attempt)] = fmt.Errorf("%w (cause %v)", err, context.Cause(ctx))
		a.mu.Unlock()
		return 0, err
	}
	return chaos.StepValue(args.Step), nil
}

// TestCompleteTxCommitReportsCommitted: with no fault at all, an
// activity's own tx.Commit after a successful activity.CompleteTx returns an
// error although the transaction committed (its effect and the outcome are
// in the database). The lease keeper sees the job finalized (see
// TestLeaseNotLostByAttemptThatCompletedItsJob) and cancels the attempt's
// context with ErrLeaseLost while pgx still waits for the COMMIT reply; pgx
// then abandons the connection and reports failure. (The test slows the
// activity's link to Postgres down so that the window is wide; without it
// the race is hit now and then.) User code that treats
// a failed Commit as "the effect did not happen" (compensates, or writes it
// elsewhere) now does it twice; River then gets an error for a job already
// completed, which the fencing layer counts as a stale write. Fixed with
// TestLeaseNotLostByAttemptThatCompletedItsJob.
func TestCompleteTxCommitReportsCommitted(t *testing.T) {
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	tables := chaos.NewTables(schema)
	_, err := pool.Exec(ctx, tables.CreateSQL())
	require.NoError(t, err)

	rejections := &staleObserver{}
	w, err := worker.New(pool, &worker.Config{
		Fencing: &fencing.Config{LeaseTTL: 300 * time.Millisecond, HeartbeatInterval: 5 * time.Millisecond, Observer: rejections},
		Schema:  schema,
	})
	require.NoError(t, err)
	// The activity's own connections go through a slow link, so the COMMIT
	// reply arrives well after the commit is visible to the lease keeper.
	proxy := dbtest.NewProxy(ctx, t, dbtest.URL(ctx, t))
	proxy.SetLatency(30 * time.Millisecond)
	slowPool, err := pgxpool.New(ctx, proxy.URL())
	require.NoError(t, err)
	t.Cleanup(slowPool.Close)
	probe := &commitProbe{EffectActivity: chaos.EffectActivity{Pool: slowPool, Tables: tables, Worker: "probe"}, failed: map[string]error{}}
	worker.AddWorkflow(w, &chaos.Workflow{})
	worker.AddActivity(w, &chaos.PlainActivity{Pool: pool, Tables: tables, Worker: "w0/0"})
	worker.AddActivity[chaos.EffectArgs, int](w, probe)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
	})
	runAndAwait(ctx, t, pool, schema, 10)

	probe.mu.Lock()
	defer probe.mu.Unlock()
	var committedAnyway []string
	for key, commitErr := range probe.failed {
		var workflowID string
		var step, attempt int
		_, err := fmt.Sscanf(strings.ReplaceAll(key, "/", " "), "%s %d %d", &workflowID, &step, &attempt)
		require.NoError(t, err)
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+tables.Effect+" WHERE workflow_id = $1 AND step = $2 AND attempt = $3",
			workflowID, step, attempt).Scan(&n))
		if n > 0 {
			committedAnyway = append(committedAnyway, fmt.Sprintf("%s: Commit said %v", key, commitErr))
		}
	}
	t.Logf("fencing stats with no fault injected: %+v; commit errors: %d", w.FencingStats(), len(probe.failed))
	rejections.mu.Lock()
	for _, e := range rejections.events {
		var kind, state string
		var attempt int
		_ = pool.QueryRow(ctx, "SELECT kind, state, attempt FROM "+dbschema.Qualify(schema, "river_job")+" WHERE id = $1", e.JobID).Scan(&kind, &state, &attempt)
		t.Logf("stale write rejected: %+v; job %s now %s at attempt %d", e, kind, state, attempt)
	}
	rejections.mu.Unlock()
	require.Empty(t, committedAnyway, "tx.Commit reported failure for transactions that committed")
}

type staleObserver struct {
	mu     sync.Mutex
	events []fencing.Event
}

func (o *staleObserver) FencingEvent(_ context.Context, e *fencing.Event) {
	if e.Kind == fencing.EventStaleWriteRejected {
		o.mu.Lock()
		o.events = append(o.events, *e)
		o.mu.Unlock()
	}
}

// rollbackOnce is an effect activity whose first attempt calls
// activity.CompleteTx and then loses its transaction (the COMMIT fails, as
// it does when the connection drops or Postgres restarts at that moment): it
// rolls back and returns the error, as any caller would.
type rollbackOnce struct {
	chaos.EffectActivity
	attempts sync.Map
}

func (a *rollbackOnce) Execute(ctx context.Context, args chaos.EffectArgs) (int, error) {
	info, _ := activity.GetInfo(ctx)
	tx, err := a.Pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "INSERT INTO "+a.Tables.Effect+" (workflow_id, run_id, step, scheduled_event_id, job_id, attempt, worker) VALUES ($1, $2, $3, $4, $5, $6, 'rollback')",
		info.WorkflowID, info.RunID, args.Step, info.ScheduledEventID, info.JobID, info.Attempt); err != nil {
		return 0, err
	}
	if err := activity.CompleteTx(ctx, tx, chaos.StepValue(args.Step)); err != nil {
		return 0, err
	}
	if _, retried := a.attempts.LoadOrStore(fmt.Sprint(info.WorkflowID, "/", args.Step), true); retried {
		if err := tx.Commit(ctx); err != nil {
			return 0, err
		}
		return chaos.StepValue(args.Step), nil
	}
	_ = tx.Rollback(ctx) // the COMMIT that never happened
	return 0, errors.New("commit failed: connection lost")
}

// TestCompleteTxWhoseCommitFailsIsRetried: the chaos
// suite's mixed scenario (800 workflows, WEIR_CHAOS_WORKFLOWS=800
// WEIR_CHAOS_RATE=40 -run TestChaosMixed) once ended a workflow with a
// wrong result and an effect that never committed (W7, F2). Reduced: an
// activity calls activity.CompleteTx, then its transaction fails to commit
// (the connection drops or Postgres restarts at that moment) and it returns
// the error. The activity worker only asks whether CompleteTx was called:
// attempt.State.Completed is set when the statement succeeds, before the
// caller's COMMIT, and work() then returns nil to River whatever Execute
// returned. So the attempt is not retried; River's completer completes the
// job; the fencing OnFinalized hook finds the activity still pending and
// resolves it as a plain River job would be: ActivityCompleted with a null
// result. The workflow reads the zero value as the activity's result and
// completes with a wrong result, while the effect never happened. Fixed:
// after CompleteTx the worker asks the job's row whether its attempt still
// holds the lease (nothing committed: the attempt fails and is retried).
func TestCompleteTxWhoseCommitFailsIsRetried(t *testing.T) {
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	tables := chaos.NewTables(schema)
	_, err := pool.Exec(ctx, tables.CreateSQL())
	require.NoError(t, err)

	w, err := worker.New(pool, &worker.Config{Schema: schema, SweepInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	worker.AddWorkflow(w, &chaos.Workflow{})
	worker.AddActivity(w, &chaos.PlainActivity{Pool: pool, Tables: tables, Worker: "w0/0"})
	worker.AddActivity[chaos.EffectArgs, int](w, &rollbackOnce{EffectActivity: chaos.EffectActivity{Pool: pool, Tables: tables}})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
	})
	// Two steps: step 1 is the effect (10), step 2 plain (2).
	c, err := client.New(pool, &client.Config{PollInterval: 100 * time.Millisecond, Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	run, err := c.Start(ctx, chaos.WorkflowArgs{ID: "rollback", Steps: 2}, nil)
	require.NoError(t, err)
	getCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, err := client.GetResult[int](getCtx, run)
	require.NoError(t, err)
	var effects int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+tables.Effect).Scan(&effects))
	var outcome string
	require.NoError(t, pool.QueryRow(ctx, "SELECT attributes::text FROM "+dbschema.Qualify(schema, "weir_history")+
		" WHERE run_id = $1 AND type = 'ActivityCompleted' ORDER BY event_id LIMIT 1", run.RunID).Scan(&outcome))
	t.Logf("result %d (want %d), effects %d (want 1), effect step's outcome %s", got, chaos.Expected(2), effects, outcome)
	require.Equal(t, 1, effects, "F2: the effect commits exactly once (by the retried attempt)")
	require.Equal(t, chaos.Expected(2), got, "W7: the workflow's result counts the effect step")
}
