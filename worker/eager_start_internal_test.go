package worker

import (
	"context"
	"errors"
	"fmt"
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
// such a context.
type sentBy struct{ n atomic.Int64 }

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
func (*sentBy) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*sentBy) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

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
	c, err := client.New(pool, &client.Config{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	names := dbschema.New(schema)

	// start starts a run with a context whose round trips are counted.
	start := func(args client.WorkflowArgs, opts *client.StartOpts) (*client.Run, int64, error) {
		before := sent.n.Load()
		run, err := c.Start(context.WithValue(ctx, sentMark{}, true), args, opts)
		return run, sent.n.Load() - before, err
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
	run, trips, err := start(stepGroupArgs{N: 0}, &client.StartOpts{EagerStart: true})
	require.NoError(t, err)
	require.GreaterOrEqual(t, trips, int64(2), "a start that read the database's clock")
	require.Equal(t, 3, result(run))

	const n = 5
	for i := 1; i <= n; i++ {
		run, trips, err := start(stepGroupArgs{N: i}, &client.StartOpts{EagerStart: true, WorkflowID: "ahead-" + string(rune('0'+i))})
		require.NoError(t, err)
		require.Equal(t, int64(1), trips, "start %d", i)
		require.True(t, run.Created)
		require.Equal(t, int64(1), run.Generation)
		require.Equal(t, 11*i+3, result(run))
		var dated, taskJobs int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE e.created_at = r.created_at),"+
			" (SELECT count(*) FROM "+names.RiverJob+" WHERE kind LIKE 'weir.workflow:%' AND args->>'run_id' = $2)"+
			" FROM "+names.Event+" e JOIN "+names.Run+" r USING (run_id) WHERE r.run_id = $1 AND e.event_id <= 3",
			run.RunID, run.RunID.String()).Scan(&dated, &taskJobs))
		require.Equal(t, 3, dated, "the first task's events are dated at the run's creation")
		require.Zero(t, taskJobs, "the first task had no job")
	}
	require.Equal(t, int64(n), w.ahead.committed.Load())
	require.Zero(t, w.ahead.rolledBack.Load())
	require.Zero(t, w.ahead.declined.Load())

	// A replay and a refusal: answered by the batch's lookup, nothing
	// inserted; the batch and its ROLLBACK are two round trips, as a start
	// that found them took before.
	live, trips, err := start(aheadWaitArgs{}, &client.StartOpts{EagerStart: true, WorkflowID: "ahead-x", RequestID: "r1"})
	require.NoError(t, err)
	require.Equal(t, int64(1), trips)
	again, trips, err := start(aheadWaitArgs{}, &client.StartOpts{EagerStart: true, WorkflowID: "ahead-x", RequestID: "r1"})
	require.NoError(t, err)
	require.Equal(t, int64(2), trips)
	require.False(t, again.Created)
	require.Equal(t, live.RunID, again.RunID)
	_, trips, err = start(aheadWaitArgs{}, &client.StartOpts{EagerStart: true, WorkflowID: "ahead-x", RequestID: "r2"})
	var started *client.WorkflowAlreadyStartedError
	require.ErrorAs(t, err, &started)
	require.Equal(t, live.RunID, started.RunID)
	require.Equal(t, int64(2), trips)
	require.NoError(t, c.Signal(ctx, "ahead-x", live.RunID, aheadDone{}, nil))
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	done, err := client.GetResult[string](waitCtx, live)
	cancel()
	require.NoError(t, err)
	require.Equal(t, "done", done)
	require.Equal(t, int64(n+3), w.ahead.committed.Load()+w.ahead.rolledBack.Load(), "every start above ran its task ahead")

	// The workflow ID's second run: the guard refuses generation 1, the
	// batch rolls back, and the start goes as before.
	rolledBack := w.ahead.rolledBack.Load()
	second, trips, err := start(aheadWaitArgs{}, &client.StartOpts{EagerStart: true, WorkflowID: "ahead-x", RequestID: "r3"})
	require.NoError(t, err)
	require.Equal(t, int64(2+2), trips, "the refused batch and its ROLLBACK, then the start in two round trips")
	require.Equal(t, rolledBack+1, w.ahead.rolledBack.Load())
	require.True(t, second.Created)
	require.Equal(t, int64(2), second.Generation)
	require.NoError(t, c.Signal(ctx, "ahead-x", second.RunID, aheadDone{}, nil))
	waitCtx, cancel = context.WithTimeout(ctx, time.Minute)
	done, err = client.GetResult[string](waitCtx, second)
	cancel()
	require.NoError(t, err)
	require.Equal(t, "done", done)

	// A first task that starts a timer sends its timer's job before its
	// last batch: it is declined, and the start goes as before.
	declined := w.ahead.declined.Load()
	sleeper, trips, err := start(aheadSleepArgs{}, &client.StartOpts{EagerStart: true})
	require.NoError(t, err)
	require.Greater(t, trips, int64(1))
	require.Equal(t, declined+1, w.ahead.declined.Load())
	waitCtx, cancel = context.WithTimeout(ctx, time.Minute)
	slept, err := client.GetResult[string](waitCtx, sleeper)
	cancel()
	require.NoError(t, err)
	require.Equal(t, "slept", slept)

	// A first task that fails ahead of its start is not run again in the
	// start: the run is inserted, and its task goes through River with the
	// failed attempt recorded (as attempt 1), which River retries.
	flaky, _, err := start(aheadFlakyArgs{}, &client.StartOpts{EagerStart: true})
	require.NoError(t, err, "a first task failing ahead of the start does not fail the start")
	require.Equal(t, int64(1), w.ahead.failed.Load())
	require.Equal(t, int64(1), aheadFlakyRuns.Load(), "the failed attempt's code ran once")
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
		wg.Wait()
		require.Len(t, created, 1, workflowID)
		require.Equal(t, map[uuid.UUID]int{created[0]: starts}, seen, workflowID)
		require.NoError(t, c.Signal(ctx, workflowID, created[0], aheadDone{}, nil))
		waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
		done, err := client.GetResult[string](waitCtx, c.GetRun(workflowID, created[0]))
		cancel()
		require.NoError(t, err)
		require.Equal(t, "done", done)
	}

	var runs, bad int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+names.Run+" WHERE workflow_id = 'ahead-x'").Scan(&runs))
	require.Equal(t, 2, runs, "the rolled-back batch left nothing")
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM (SELECT run_id FROM "+names.Event+" GROUP BY run_id"+
		" HAVING max(event_id) <> count(*) OR count(*) FILTER (WHERE type = 'WorkflowStarted') <> 1) x").Scan(&bad))
	require.Zero(t, bad, "runs whose history has a gap or not one start")
}
