package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// GatedArgs are the args of GatedWorkflow.
type GatedArgs struct {
	Steps int `json:"steps"`
}

func (GatedArgs) Kind() string { return "gated" }

// GatedWorkflow runs Steps GatedStep activities one after another and
// returns the last one's result.
type GatedWorkflow struct {
	workflow.Defaults[GatedArgs, int]
}

func (GatedWorkflow) Run(ctx workflow.Context, args GatedArgs) (int, error) {
	n := 0
	for range args.Steps {
		var err error
		if n, err = workflow.ExecuteActivity[int](ctx, GatedStepArgs{N: n}, nil).Get(ctx); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// GatedStepArgs are the args of GatedStepActivity.
type GatedStepArgs struct {
	N int `json:"n"`
}

func (GatedStepArgs) Kind() string { return "gated_step" }

// GatedStepActivity returns N+1 once its gate is open.
type GatedStepActivity struct {
	activity.Defaults[GatedStepArgs, int]

	gate chan struct{}
}

func (a *GatedStepActivity) Execute(ctx context.Context, args GatedStepArgs) (int, error) {
	select {
	case <-a.gate:
		return args.N + 1, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// startGated starts a worker of config running GatedWorkflow, linked to
// b's client, and returns it with its GatedStepActivity, gate closed.
func startGated(ctx context.Context, t *testing.T, b *testBundle, config *worker.Config) (*worker.Worker, *GatedStepActivity) {
	t.Helper()
	gated := &GatedStepActivity{gate: make(chan struct{})}
	w, err := worker.New(b.pool, config)
	require.NoError(t, err)
	worker.AddWorkflow(w, &GatedWorkflow{})
	worker.AddActivity(w, gated)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
	})
	b.link(t, w)
	return w, gated
}

// TestEagerStartBurstKeepsRunsCached: a burst of eager starts larger than
// the worker's run cache runs the first tasks in the starts only while the
// cache has room for their runs; the rest go through River, and are taken
// as runs leave the cache. No run is evicted before its next task: none
// reads its history back from the database.
func TestEagerStartBurstKeepsRunsCached(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	const cached, runs, steps = 8, 50, 3
	w, gated := startGated(ctx, t, b, &worker.Config{Schema: b.schema, MaxCachedRuns: cached})

	// The whole burst starts while the runs' first activities wait: every
	// run started stays in flight.
	started := make([]*client.Run, runs)
	var g errgroup.Group
	for i := range started {
		g.Go(func() (err error) {
			started[i], err = b.client.Start(ctx, GatedArgs{Steps: steps}, &client.StartOpts{EagerStart: true})
			return err
		})
	}
	require.NoError(t, g.Wait())
	close(gated.gate)

	inStart := 0
	for _, run := range started {
		got, err := getWithin[int](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, steps, got)
		if _, ok := firstTaskOf(ctx, t, b, run.RunID.String()); !ok {
			inStart++
		}
	}
	stats := worker.CacheStats(w)
	t.Logf("%d runs, %d cached, %d first tasks in their starts: %+v", runs, cached, inStart, stats)
	require.Zero(t, stats.Misses, "no run read its history back from the database")
	require.Positive(t, inStart, "first tasks ran in their starts")
	require.LessOrEqual(t, inStart, cached, "no more first tasks ran in their starts than the cache holds")
	require.Less(t, inStart, runs, "starts found the cache full: their first tasks went through River")
	require.Positive(t, stats.Hits)
}

// TestTaskWithoutRoomGoesBackToItsQueue: a fetched task of a run new to a
// full run cache waits for room for half its time, then goes back to its
// queue with no attempt used and no error recorded; it runs once room
// frees up.
func TestTaskWithoutRoomGoesBackToItsQueue(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	_, gated := startGated(ctx, t, b, &worker.Config{Schema: b.schema, MaxCachedRuns: 1, TaskTimeout: time.Second})

	// The first run's activity holds the cache's one place in flight.
	first, err := b.client.Start(ctx, GatedArgs{Steps: 1}, &client.StartOpts{EagerStart: true})
	require.NoError(t, err)
	_, ok := firstTaskOf(ctx, t, b, first.RunID.String())
	require.False(t, ok, "the first task ran in its start")
	second, err := b.client.Start(ctx, GatedArgs{Steps: 1}, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		f, ok := firstTaskOf(ctx, t, b, second.RunID.String())
		return ok && f.fetched
	}, 10*time.Second, 20*time.Millisecond, "the second run's task was fetched")
	time.Sleep(3 * time.Second) // past the task's timeout, twice
	f, _ := firstTaskOf(ctx, t, b, second.RunID.String())
	require.Zero(t, f.errors, "a task waiting for room recorded no error")
	require.LessOrEqual(t, f.attempt, 1, "a task waiting for room used no attempt")

	close(gated.gate)
	for _, run := range []*client.Run{first, second} {
		got, err := getWithin[int](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, 1, got)
	}
	f, _ = firstTaskOf(ctx, t, b, second.RunID.String())
	require.Zero(t, f.errors)
}
