package worker_test

import (
	"context"
	"sync/atomic"
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

// GatedStepActivity returns N+1 once its gate is open, counting the
// executions waiting at it.
type GatedStepActivity struct {
	activity.Defaults[GatedStepArgs, int]

	gate          chan struct{}
	waiting, most atomic.Int32 // executions at the gate, now and at most
}

func (a *GatedStepActivity) Execute(ctx context.Context, args GatedStepArgs) (int, error) {
	n := a.waiting.Add(1)
	defer a.waiting.Add(-1)
	for most := a.most.Load(); n > most && !a.most.CompareAndSwap(most, n); most = a.most.Load() {
	}
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

// holdOnlyPlace starts a gated worker whose run cache has one place in
// flight (TaskTimeout 1 s), and a run whose first task ran in its eager
// start and whose activity, blocked on the gate, holds that place.
func holdOnlyPlace(ctx context.Context, t *testing.T, b *testBundle) (*client.Run, *GatedStepActivity) {
	t.Helper()
	_, gated := startGated(ctx, t, b, &worker.Config{Schema: b.schema, MaxCachedRuns: 1, TaskTimeout: time.Second})
	first, err := b.client.Start(ctx, GatedArgs{Steps: 1}, &client.StartOpts{EagerStart: true})
	require.NoError(t, err)
	_, queued := firstTaskOf(ctx, t, b, first.RunID.String())
	require.False(t, queued, "the first task ran in its start")
	return first, gated
}

// TestEagerStartBurstWaitsForRoom: a burst of eager starts larger than the
// worker's run cache runs every first task in its start: the starts beyond
// the cache's room wait for runs in flight to settle (Reserve) rather than
// queue their tasks through River, and no more runs are in flight at once
// than the cache holds. No run is evicted before its next task: none reads
// its history back from the database.
func TestEagerStartBurstWaitsForRoom(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	const cached, runs, steps = 8, 50, 3
	w, gated := startGated(ctx, t, b, &worker.Config{Schema: b.schema, MaxCachedRuns: cached})

	started := make([]*client.Run, runs)
	var (
		g        errgroup.Group
		returned atomic.Int32
	)
	for i := range started {
		g.Go(func() (err error) {
			defer returned.Add(1)
			started[i], err = b.client.Start(ctx, GatedArgs{Steps: steps}, &client.StartOpts{EagerStart: true})
			return err
		})
	}
	// The runs that found room hold it at their first activity's gate; the
	// other starts wait.
	require.Eventually(t, func() bool { return gated.waiting.Load() == cached }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, int32(cached), returned.Load(), "only the starts that found room returned")
	close(gated.gate)
	require.NoError(t, g.Wait())

	for _, run := range started {
		got, err := getWithin[int](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, steps, got)
		_, queued := firstTaskOf(ctx, t, b, run.RunID.String())
		require.False(t, queued, "the first task of run %s ran in its start", run.RunID)
	}
	stats := worker.CacheStats(w)
	t.Logf("%d runs, %d cached: %+v; at most %d activities at the gate", runs, cached, stats, gated.most.Load())
	require.Zero(t, stats.Misses, "no run read its history back from the database")
	require.LessOrEqual(t, gated.most.Load(), int32(cached), "no more runs in flight than the cache holds")
	require.Positive(t, stats.Hits)
}

// TestEagerStartWithoutRoomGoesThroughRiver: an eager start that finds no
// room for its run in flight waits for at most half of the worker's
// TaskTimeout, then queues its first task through River; the run goes on
// once room frees up.
func TestEagerStartWithoutRoomGoesThroughRiver(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	first, gated := holdOnlyPlace(ctx, t, b)
	second, err := b.client.Start(ctx, GatedArgs{Steps: 1}, &client.StartOpts{EagerStart: true})
	require.NoError(t, err)
	_, queued := firstTaskOf(ctx, t, b, second.RunID.String())
	require.True(t, queued, "the second start found no room in time: its first task went through River")

	close(gated.gate)
	for _, run := range []*client.Run{first, second} {
		got, err := getWithin[int](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, 1, got)
	}
}

// TestTaskWithoutRoomGoesBackToItsQueue: a fetched task of a run new to a
// full run cache waits for room for half its time, then goes back to its
// queue with no attempt used and no error recorded; it runs once room
// frees up.
func TestTaskWithoutRoomGoesBackToItsQueue(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	first, gated := holdOnlyPlace(ctx, t, b)
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
