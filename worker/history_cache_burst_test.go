package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
)

// TestHistoryCacheUnderBurst: in a burst of more runs than the cache holds,
// runs that wait on a timer between their tasks (not in flight: the cache
// admits new runs past them) leave the cache before their next task and
// replay; once the burst is over, a run advanced task after task keeps its
// code again.
func TestHistoryCacheUnderBurst(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	const cached, runs, steps = 16, 200, 3

	// The whole burst is queued before the worker starts.
	started := make([]*client.Run, runs)
	for i := range started {
		run, err := b.client.Start(ctx, StickyArgs{Key: "burst", Steps: steps, Sleep: true}, nil)
		require.NoError(t, err)
		started[i] = run
	}
	wf := newStickyWorkflow()
	w, err := worker.New(b.pool, &worker.Config{Schema: b.schema, MaxCachedRuns: cached})
	require.NoError(t, err)
	worker.AddWorkflow(w, wf)
	worker.AddActivity(w, &StepActivity{})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
	})
	for _, run := range started {
		got, err := getWithin[int](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, steps, got)
	}
	burst := worker.CacheStats(w)
	t.Logf("burst of %d runs, %d cached: %+v", runs, cached, burst)
	require.Positive(t, burst.Misses, "the burst overflows the cache")

	// A normal load after the burst: the run's code is kept between its
	// tasks again (only its first task runs it from the start).
	run, err := b.client.Start(ctx, StickyArgs{Key: "after", Steps: 10}, nil)
	require.NoError(t, err)
	got, err := getWithin[int](ctx, t, run)
	require.NoError(t, err)
	require.Equal(t, 10, got)
	after := worker.CacheStats(w)
	t.Logf("then one run of 10 steps: %+v", after)
	require.Equal(t, 1, wf.startsOf("after"), fmt.Sprintf("11 tasks; stats %+v", after))
	require.GreaterOrEqual(t, after.CachedRunHits-burst.CachedRunHits, int64(10))
}
