package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/workflow"
)

// sentBy counts the statements and batches sent on behalf of contexts
// marked with its mark (sentMark): the round trips of the calls made with
// such a context. It keeps the SQL of the batches' statements.
type sentBy struct {
	n       atomic.Int64
	mu      sync.Mutex
	batched []string
}

// sentMark marks a context whose round trips sentBy counts.
type sentMark struct{}

func (s *sentBy) count(ctx context.Context) context.Context {
	if ctx.Value(sentMark{}) != nil {
		s.n.Add(1)
	}
	return ctx
}

func (s *sentBy) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return s.count(ctx)
}
func (*sentBy) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *sentBy) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return s.count(ctx)
}
func (s *sentBy) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if ctx.Value(sentMark{}) != nil {
		s.mu.Lock()
		s.batched = append(s.batched, d.SQL)
		s.mu.Unlock()
	}
}

func (*sentBy) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// batchedSince is the SQL of the batches' statements since the first n.
func (s *sentBy) batchedSince(n int) (sql []string, now int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.batched[n:]), len(s.batched)
}

// aheadSleepArgs are the args of aheadSleepWorkflow.
type aheadSleepArgs struct{}

func (aheadSleepArgs) Kind() string { return "ahead_sleep" }

// aheadSleepWorkflow's first task starts a timer.
type aheadSleepWorkflow struct {
	workflow.Defaults[aheadSleepArgs, string]
}

func (*aheadSleepWorkflow) Run(ctx workflow.Context, _ aheadSleepArgs) (string, error) {
	if err := workflow.Sleep(ctx, 10*time.Millisecond); err != nil {
		return "", err
	}
	return "slept", nil
}

// aheadWaitArgs are the args of aheadWaitWorkflow.
type aheadWaitArgs struct{}

func (aheadWaitArgs) Kind() string { return "ahead_wait" }

// aheadDone is the signal aheadWaitWorkflow waits for.
type aheadDone struct{}

func (aheadDone) Kind() string { return "ahead_done" }

// aheadWaitWorkflow stays live until it gets aheadDone.
type aheadWaitWorkflow struct {
	workflow.Defaults[aheadWaitArgs, string]
}

func (*aheadWaitWorkflow) Run(ctx workflow.Context, _ aheadWaitArgs) (string, error) {
	if _, err := workflow.GetSignalChannel[aheadDone](ctx).Receive(ctx); err != nil {
		return "", err
	}
	return "done", nil
}

// aheadFlakyArgs are the args of aheadFlakyWorkflow.
type aheadFlakyArgs struct{}

func (aheadFlakyArgs) Kind() string { return "ahead_flaky" }

// aheadFlakyRuns counts the runs of aheadFlakyWorkflow's code in its first
// task's first attempt.
var aheadFlakyRuns atomic.Int64

// aheadFlakyWorkflow panics in its first task's first attempt and returns
// the attempt that got through.
type aheadFlakyWorkflow struct {
	workflow.Defaults[aheadFlakyArgs, int]
}

func (*aheadFlakyWorkflow) Run(ctx workflow.Context, _ aheadFlakyArgs) (int, error) {
	attempt := workflow.GetInfo(ctx).TaskAttempt
	if attempt == 1 {
		aheadFlakyRuns.Add(1)
		panic("the first attempt of the first task fails")
	}
	return attempt, nil
}

// TestStartInOneRoundTrip: once the worker has an estimate of the
// database's clock, an eager start alone is one round trip (its first task
// run ahead, its writes sent with the run's insert and the COMMIT); the
// run's first events are dated at its creation. A start the batch's guard
// refuses (a workflow ID's second run) rolls back and starts as before; a
// replay or a refusal is answered from the batch's lookup.
func TestStartInOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	schema := dbtest.TestSchema(ctx, t)
	config, err := pgxpool.ParseConfig(dbtest.URL(ctx, t))
	require.NoError(t, err)
	sent := &sentBy{}
	config.ConnConfig.Tracer = sent
	pool, err := pgxpool.NewWithConfig(ctx, config)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	w, err := New(pool, &Config{Schema: schema})
	require.NoError(t, err)
	AddWorkflow(w, &stepGroupWorkflow{})
	AddWorkflow(w, &aheadSleepWorkflow{})
	AddWorkflow(w, &aheadWaitWorkflow{})
	AddWorkflow(w, &aheadFlakyWorkflow{})
	AddActivity(w, &stepGroupAct{})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.WithoutCancel(ctx))) })
	c, err := client.New(pool, &client.Config{Schema: schema, EagerStarter: w})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	names := dbschema.New(schema)

	// startBy starts a run through c with a context whose round trips are
	// counted; start through the test's client.
	startBy := func(c *client.Client, args client.WorkflowArgs, opts *client.StartOpts) (*client.Run, int64, error) {
		before := sent.n.Load()
		run, err := c.Start(context.WithValue(ctx, sentMark{}, true), args, opts)
		return run, sent.n.Load() - before, err
	}
	start := func(args client.WorkflowArgs, opts *client.StartOpts) (*client.Run, int64, error) {
		return startBy(c, args, opts)
	}
	// fresh is a client that has seen no workflow ID taken.
	fresh := func() *client.Client {
		c, err := client.New(pool, &client.Config{Schema: schema, EagerStarter: w})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	result := func(run *client.Run) int {
		waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		got, err := client.GetResult[int](waitCtx, run)
		require.NoError(t, err)
		return got
	}

	// The first start reads the database's clock (two round trips, and
	// one to reserve job IDs for its activities' claims).
	_, known := w.clock.now()
	run, trips, err := start(stepGroupArgs{N: 0}, &client.StartOpts{EagerStart: true})
	require.NoError(t, err)
	if !known {
		require.GreaterOrEqual(t, trips, int64(2), "a start that read the database's clock")
	}
	require.Equal(t, 3, result(run))
	base := w.ahead.committed.Load() // 0 unless the worker knew the clock already

	const n = 5
	for i := 1; i <= n; i++ {
		_, seen := sent.batchedSince(0)
		run, trips, err := start(stepGroupArgs{N: i}, &client.StartOpts{EagerStart: true, WorkflowID: "ahead-" + string(rune('0'+i))})
		require.NoError(t, err)
		require.Equal(t, int64(1), trips, "start %d", i)
		// The run is inserted at its first task's append point: the batch
		// has no write of the run's row of its own.
		batched, _ := sent.batchedSince(seen)
		for _, sql := range batched {
			require.NotContains(t, sql, "UPDATE "+names.Run, "start %d", i)
		}
		require.True(t, run.Created)
		require.Equal(t, int64(1), run.Generation)
		require.Equal(t, 11*i+3, result(run))
		var dated, taskJobs int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE e.created_at = r.created_at),"+
			" (SELECT count(*) FROM "+names.RiverJob+" WHERE kind LIKE 'weir.workflow:%' AND args->>'run_id' = $2)"+
			" FROM "+names.History+" e JOIN "+names.Run+" r USING (run_id) WHERE r.run_id = $1 AND e.event_id <= 3",
			run.RunID, run.RunID.String()).Scan(&dated, &taskJobs))
		require.Equal(t, 3, dated, "the first task's events are dated at the run's creation")
		require.Zero(t, taskJobs, "the first task had no job")
	}
	require.Equal(t, base+n, w.ahead.committed.Load())
	require.Zero(t, w.ahead.rolledBack.Load())
	require.Zero(t, w.ahead.declined.Load())

	// The start's read of now() feeds the clock's estimate: with its
	// window ten seconds old, the start opens a new one.
	w.clock.mu.Lock()
	w.clock.window = w.clock.window.Add(-dbClockWindow)
	w.clock.mu.Unlock()
	before := time.Now()
	fed, trips, err := start(aheadWaitArgs{}, &client.StartOpts{EagerStart: true, WorkflowID: "ahead-clock"})
	require.NoError(t, err)
	require.Equal(t, int64(1), trips)
	w.clock.mu.Lock()
	window := w.clock.window
	w.clock.mu.Unlock()
	require.True(t, window.After(before), "the start's reading opened a window")
	require.NoError(t, c.Signal(ctx, "ahead-clock", fed.RunID, aheadDone{}, nil))

	// A replay and a refusal, by a client that has not seen the workflow
	// ID taken: the batch's guard fails, and they are answered by its
	// lookup, nothing inserted; the batch and its ROLLBACK are two round
	// trips, as a start that found them took before.
	live, trips, err := start(aheadWaitArgs{}, &client.StartOpts{EagerStart: true, WorkflowID: "ahead-x", RequestID: "r1"})
	require.NoError(t, err)
	require.Equal(t, int64(1), trips)
	require.Equal(t, base+n+2, w.ahead.committed.Load())
	again, trips, err := startBy(fresh(), aheadWaitArgs{}, &client.StartOpts{EagerStart: true, WorkflowID: "ahead-x", RequestID: "r1"})
	require.NoError(t, err)
	require.Equal(t, int64(2), trips)
	require.False(t, again.Created)
	require.Equal(t, live.RunID, again.RunID)
	require.Equal(t, int64(1), w.ahead.rolledBack.Load(), "the replay went ahead and rolled back")
	var started *client.WorkflowAlreadyStartedError
	_, trips, err = startBy(fresh(), aheadWaitArgs{}, &client.StartOpts{EagerStart: true, WorkflowID: "ahead-x", RequestID: "r2"})
	require.ErrorAs(t, err, &started)
	require.Equal(t, live.RunID, started.RunID)
	require.Equal(t, int64(2), trips)
	require.Equal(t, int64(2), w.ahead.rolledBack.Load(), "the refusal went ahead and rolled back")
	// The client that started it knows the ID taken: its starts of it go
	// in two round trips without running the task ahead.
	_, trips, err = start(aheadWaitArgs{}, &client.StartOpts{EagerStart: true, WorkflowID: "ahead-x", RequestID: "r3"})
	require.ErrorAs(t, err, &started)
	require.Equal(t, int64(2), trips)
	require.Equal(t, int64(2), w.ahead.rolledBack.Load())
	require.Equal(t, base+n+2, w.ahead.committed.Load())
	require.NoError(t, c.Signal(ctx, "ahead-x", live.RunID, aheadDone{}, nil))
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	done, err := client.GetResult[string](waitCtx, live)
	cancel()
	require.NoError(t, err)
	require.Equal(t, "done", done)

	// A workflow ID's second run, by a client that has not seen it: the
	// guard refuses generation 1, the batch (with the claims of its two
	// activities) rolls back, and the start goes as before.
	first, trips, err := start(stepGroupArgs{N: 7}, &client.StartOpts{EagerStart: true, WorkflowID: "ahead-y"})
	require.NoError(t, err)
	require.Equal(t, int64(1), trips)
	require.Equal(t, 11*7+3, result(first))
	second, trips, err := startBy(fresh(), stepGroupArgs{N: 8}, &client.StartOpts{EagerStart: true, WorkflowID: "ahead-y"})
	require.NoError(t, err)
	require.Equal(t, int64(2+2), trips, "the refused batch and its ROLLBACK, then the start in two round trips")
	require.Equal(t, int64(3), w.ahead.rolledBack.Load())
	require.True(t, second.Created)
	require.Equal(t, int64(2), second.Generation)
	require.Equal(t, 11*8+3, result(second))

	// A first task that starts a timer sends its timer's job before its
	// last batch: it is declined, and the start goes as before; the next
	// starts of that workflow go so without running their task ahead.
	for i := range 2 {
		sleeper, trips, err := start(aheadSleepArgs{}, &client.StartOpts{EagerStart: true})
		require.NoError(t, err)
		require.Greater(t, trips, int64(1))
		require.Equal(t, int64(1), w.ahead.declined.Load(), "start %d", i)
		waitCtx, cancel = context.WithTimeout(ctx, time.Minute)
		slept, err := client.GetResult[string](waitCtx, sleeper)
		cancel()
		require.NoError(t, err)
		require.Equal(t, "slept", slept)
	}

	// A first task that fails ahead of its start is not run again in the
	// start: the run is inserted, and its task goes through River with the
	// failed attempt recorded (as attempt 1), which River retries.
	flakyRuns := aheadFlakyRuns.Load()
	flaky, _, err := start(aheadFlakyArgs{}, &client.StartOpts{EagerStart: true})
	require.NoError(t, err, "a first task failing ahead of the start does not fail the start")
	require.Equal(t, int64(1), w.ahead.failed.Load())
	require.Equal(t, flakyRuns+1, aheadFlakyRuns.Load(), "the failed attempt's code ran once")
	waitCtx, cancel = context.WithTimeout(ctx, time.Minute)
	attempt, err := client.GetResult[int](waitCtx, flaky)
	cancel()
	require.NoError(t, err)
	require.Equal(t, 2, attempt, "River ran the task again, as attempt 2")
	var taskErrors int
	var firstErr string
	require.NoError(t, pool.QueryRow(ctx, "SELECT coalesce(array_length(errors, 1), 0), coalesce(errors[1]->>'error', '') FROM "+names.RiverJob+
		" WHERE kind LIKE 'weir.workflow:%' AND args->>'run_id' = $1", flaky.RunID.String()).Scan(&taskErrors, &firstErr))
	require.Equal(t, 1, taskErrors)
	require.Contains(t, firstErr, "the first attempt of the first task fails")
	require.Contains(t, firstErr, flaky.RunID.String(), "the error names the run started")

	// One that fails ahead at generation 1 while the start makes a later
	// generation runs again in the start, at that generation.
	flakyFirst, _, err := start(aheadFlakyArgs{}, &client.StartOpts{EagerStart: true, WorkflowID: "ahead-z"})
	require.NoError(t, err)
	waitCtx, cancel = context.WithTimeout(ctx, time.Minute)
	_, err = client.GetResult[int](waitCtx, flakyFirst)
	cancel()
	require.NoError(t, err)
	runs := aheadFlakyRuns.Load()
	flakySecond, _, err := startBy(fresh(), aheadFlakyArgs{}, &client.StartOpts{EagerStart: true, WorkflowID: "ahead-z"})
	require.NoError(t, err)
	require.Equal(t, int64(2), flakySecond.Generation)
	require.Equal(t, runs+2, aheadFlakyRuns.Load(), "ahead at generation 1, then in the start at generation 2")
	waitCtx, cancel = context.WithTimeout(ctx, time.Minute)
	attempt, err = client.GetResult[int](waitCtx, flakySecond)
	cancel()
	require.NoError(t, err)
	require.Equal(t, 2, attempt)

	// Starts of one workflow ID at once (W1, W2): one run, whichever
	// way each start went; the others are refused or replay it.
	for _, sameRequest := range []bool{false, true} {
		workflowID := fmt.Sprint("ahead-race-", sameRequest)
		const starts = 8
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			created []uuid.UUID
			seen    = map[uuid.UUID]int{}
		)
		for i := range starts {
			wg.Go(func() {
				requestID := fmt.Sprint("r", i)
				if sameRequest {
					requestID = "same"
				}
				run, err := c.Start(ctx, aheadWaitArgs{}, &client.StartOpts{EagerStart: true, WorkflowID: workflowID, RequestID: requestID})
				mu.Lock()
				defer mu.Unlock()
				var started *client.WorkflowAlreadyStartedError
				switch {
				case err == nil && run.Created:
					created = append(created, run.RunID)
					seen[run.RunID]++
				case err == nil:
					seen[run.RunID]++
				case errors.As(err, &started) && !sameRequest:
					seen[started.RunID]++
				default:
					t.Errorf("start %d of %s: %v", i, workflowID, err)
				}
			})
		}
		committed := w.ahead.committed.Load()
		wg.Wait()
		require.Len(t, created, 1, workflowID)
		require.Greater(t, w.ahead.committed.Load()+w.ahead.rolledBack.Load(), committed, "starts went ahead")
		require.Equal(t, map[uuid.UUID]int{created[0]: starts}, seen, workflowID)
		require.NoError(t, c.Signal(ctx, workflowID, created[0], aheadDone{}, nil))
		waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
		done, err := client.GetResult[string](waitCtx, c.GetRun(workflowID, created[0]))
		cancel()
		require.NoError(t, err)
		require.Equal(t, "done", done)
	}

	var kept, bad int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+names.Run+" WHERE workflow_id IN ('ahead-x', 'ahead-y')").Scan(&kept))
	require.Equal(t, 3, kept, "the rolled-back batches left nothing")
	require.Eventually(t, func() bool { return len(w.eager.slots) == 0 }, 10*time.Second, 10*time.Millisecond,
		"every eager slot is free again (those of the rolled-back claims too)")
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM (SELECT run_id FROM "+names.History+" GROUP BY run_id"+
		" HAVING max(event_id) <> count(*) OR count(*) FILTER (WHERE type = 'WorkflowStarted') <> 1) x").Scan(&bad))
	require.Zero(t, bad, "runs whose history has a gap or not one start")
}

// TestStartInOneRoundTripPlansOnce: the run's insert in a start of one
// round trip (a statement over arrays) runs on its generic plan, made once
// per connection, not on a custom plan made again on every start.
func TestStartInOneRoundTripPlansOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	schema := dbtest.TestSchema(ctx, t)
	w, err := New(dbtest.Pool(ctx, t), &Config{Schema: schema})
	require.NoError(t, err)
	AddWorkflow(w, &stepGroupWorkflow{})
	AddActivity(w, &stepGroupAct{})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.WithoutCancel(ctx))) })
	// The client's starts all go on one connection, whose plans are read.
	config, err := pgxpool.ParseConfig(dbtest.URL(ctx, t))
	require.NoError(t, err)
	config.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, config)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := client.New(pool, &client.Config{Schema: schema, EagerStarter: w})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	const n = 12 // Postgres tries a generic plan after five custom ones
	for i := range n + 1 {
		run, err := c.Start(ctx, stepGroupArgs{N: i}, &client.StartOpts{EagerStart: true})
		require.NoError(t, err)
		waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err = client.GetResult[int](waitCtx, run)
		cancel()
		require.NoError(t, err)
	}
	require.GreaterOrEqual(t, w.ahead.committed.Load(), int64(n), "the starts went in one round trip")

	var custom, generic int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT coalesce(sum(custom_plans), 0), coalesce(sum(generic_plans), 0) FROM pg_prepared_statements"+
		" WHERE statement LIKE '%INSERT INTO '||$1||' %'", dbschema.New(schema).Run).Scan(&custom, &generic))
	require.GreaterOrEqual(t, generic, int64(n), "the runs' inserts ran on generic plans")
	require.LessOrEqual(t, custom, int64(1), "the first start, which read the database's clock, may plan its own")
}
