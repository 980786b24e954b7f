package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/limit"
)

// TestWorkersShareTheirFirstGroups: workers on one database start their step
// groups' limit at their share of it, and follow the fleet as workers start
// and stop: the joining worker counts the others when it announces itself,
// and the others count again when its announcement reaches them. Their
// sweepers wait their share of the fleet's sweeping the same way.
func TestWorkersShareTheirFirstGroups(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	const sweepInterval = time.Hour
	start := func() *Worker {
		t.Helper()
		w, err := New(pool, &Config{Schema: schema, AnnounceInterval: time.Hour, SweepInterval: sweepInterval})
		require.NoError(t, err)
		w.stepGroups = limit.New(8, 64)
		AddWorkflow(w, &stepGroupWorkflow{})
		AddActivity(w, &stepGroupAct{})
		require.NoError(t, w.Start(ctx))
		return w
	}
	stop := func(w *Worker) {
		t.Helper()
		require.NoError(t, w.Stop(context.WithoutCancel(ctx)))
	}
	// Each worker's limit is its share of 8, and its sweeper waits its
	// share of the fleet's sweeping: the interval times the live workers.
	requireLimits := func(want int, live int64, ws ...*Worker) {
		t.Helper()
		require.Eventually(t, func() bool {
			for _, w := range ws {
				if w.stepGroups.Limit() != want || w.liveWorkers.Load() != live {
					return false
				}
			}
			return true
		}, 10*time.Second, 10*time.Millisecond, "want every limit at %d", want)
		for _, w := range ws {
			for range 100 {
				d := w.sweeper.wait()
				require.GreaterOrEqual(t, d, sweepInterval*time.Duration(live)*3/4)
				require.Less(t, d, sweepInterval*time.Duration(live)*5/4)
			}
		}
	}

	w1 := start()
	t.Cleanup(func() { stop(w1) })
	require.Equal(t, 8, w1.stepGroups.Limit(), "alone, the whole of it")
	w2 := start()
	require.Equal(t, 4, w2.stepGroups.Limit(), "counted when it announced itself")
	requireLimits(4, 2, w1, w2)
	w3 := start()
	requireLimits(2, 3, w1, w2, w3)
	stop(w3)
	requireLimits(4, 2, w1, w2)
	stop(w2)
	requireLimits(8, 1, w1)
}
