// Package integration holds end-to-end tests across packages against real
// Postgres servers, including ones the tests crash and restart.
package integration

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type StepArgs struct {
	Run  string `json:"run"`
	Step int    `json:"step"`
}

func (StepArgs) Kind() string { return "step" }

// StepActivity takes a little while, so crashes land mid-activity.
type StepActivity struct {
	activity.Defaults[StepArgs, int]
	calls atomic.Int64
}

func (a *StepActivity) Execute(ctx context.Context, args StepArgs) (int, error) {
	a.calls.Add(1)
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return args.Step, nil
}

type PipelineArgs struct {
	ID    string `json:"id"`
	Steps int    `json:"steps"`
}

func (PipelineArgs) Kind() string { return "pipeline" }

type PipelineWorkflow struct {
	workflow.Defaults[PipelineArgs, int]
}

func (w *PipelineWorkflow) Run(ctx workflow.Context, args PipelineArgs) (int, error) {
	sum := 0
	for step := 1; step <= args.Steps; step++ {
		n, err := workflow.ExecuteActivity[int](ctx, StepArgs{Run: args.ID, Step: step}, &workflow.ActivityOpts{
			RetryPolicy: &workflow.RetryPolicy{InitialInterval: 50 * time.Millisecond, MaximumInterval: time.Second},
		}).Get(ctx)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

// TestPostgresCrashLosesNothing is W7 across a Postgres crash: workflows in
// flight when the server dies (immediate shutdown, crash recovery) all finish
// after it comes back, each exactly once, with well-formed histories.
func TestPostgresCrashLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	server := dbtest.Server(ctx, t, nil)
	pool, err := pgxpool.New(ctx, server.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	const schema = "weir"
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	require.NoError(t, err)
	_, err = migrator.Up(ctx, nil)
	require.NoError(t, err)

	steps := &StepActivity{}
	w, err := worker.New(pool, &worker.Config{
		Fencing:       &fencing.Config{LeaseTTL: 2 * time.Second, ReaperInterval: 200 * time.Millisecond},
		Schema:        schema,
		SweepInterval: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	worker.AddWorkflow(w, &PipelineWorkflow{})
	worker.AddActivity(w, steps)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		_ = w.Stop(stopCtx)
	})
	c, err := client.New(pool, &client.Config{PollInterval: 200 * time.Millisecond, Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	const workflows, stepsEach = 40, 5
	runs := make([]*client.Run, workflows)
	for i := range runs {
		runs[i], err = c.Start(ctx, PipelineArgs{ID: fmt.Sprint(i), Steps: stepsEach}, &client.StartOpts{WorkflowID: fmt.Sprint("pipeline-", i)})
		require.NoError(t, err)
	}

	// Crash once some activities have run and most have not.
	deadline := time.Now().Add(time.Minute)
	for steps.calls.Load() < workflows && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) //nolint:forbidigo // polling a condition with a deadline
	}
	require.NoError(t, server.Crash(ctx))
	require.NoError(t, server.Start(ctx))

	var wg sync.WaitGroup
	results := make([]int, workflows)
	errs := make([]error, workflows)
	for i, run := range runs {
		wg.Go(func() {
			getCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			results[i], errs[i] = client.GetResult[int](getCtx, run)
		})
	}
	wg.Wait()
	for i := range runs {
		require.NoError(t, errs[i], "run %d", i)
		require.Equal(t, stepsEach*(stepsEach+1)/2, results[i], "run %d", i)
	}

	names := dbschema.New(schema)
	var events, duplicates, gaps int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*),"+
		" count(resolves_event_id) - (SELECT count(*) FROM (SELECT DISTINCT run_id, resolves_event_id FROM "+names.History+
		"  WHERE resolves_event_id IS NOT NULL) d),"+
		" (SELECT count(*) FROM (SELECT run_id FROM "+names.History+" GROUP BY run_id HAVING max(event_id) <> count(*)) g)"+
		" FROM "+names.History).Scan(&events, &duplicates, &gaps))
	require.Positive(t, events)
	require.Zero(t, duplicates, "no activity has two outcomes")
	require.Zero(t, gaps, "every history is gap-free")
	var completed, outcomes int
	require.NoError(t, pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+names.Run+" WHERE state = 'completed'),"+
		" (SELECT count(*) FROM "+names.History+" WHERE type = 'ActivityCompleted')").Scan(&completed, &outcomes))
	require.Equal(t, workflows, completed)
	require.Equal(t, workflows*stepsEach, outcomes, "each step's outcome entered history once")
}
