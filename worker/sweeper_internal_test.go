package worker

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
)

// TestSweepDelay: a worker waits its interval times the live workers (at
// least one), jittered within [0.75, 1.25) of that, across the whole range,
// and saturates rather than overflow.
func TestSweepDelay(t *testing.T) {
	t.Parallel()
	const interval = 5 * time.Second
	lowest := func(int64) int64 { return 0 }
	highest := func(n int64) int64 { return n - 1 }
	for _, live := range []int64{-2, 0, 1, 2, 4, 100} {
		share := interval * time.Duration(max(live, 1))
		require.Equal(t, share*3/4, sweepDelay(interval, live, lowest), "live %d", live)
		require.Less(t, sweepDelay(interval, live, highest), share*5/4, "live %d", live)
		require.Greater(t, sweepDelay(interval, live, highest), share*5/4-time.Microsecond, "live %d", live)

		r := rand.New(rand.NewPCG(1, uint64(live)))
		low, high := time.Duration(math.MaxInt64), time.Duration(0)
		for range 1000 {
			d := sweepDelay(interval, live, r.Int64N)
			low, high = min(low, d), max(high, d)
		}
		require.GreaterOrEqual(t, low, share*3/4, "live %d", live)
		require.Less(t, high, share*5/4, "live %d", live)
		require.Less(t, low, share*4/5, "live %d: jittered down", live)
		require.Greater(t, high, share*6/5, "live %d: jittered up", live)
	}
	for _, interval := range []time.Duration{sweepDelayLongest / 4, sweepDelayLongest, math.MaxInt64} {
		require.Equal(t, time.Duration(sweepDelayLongest-sweepDelayLongest/4), sweepDelay(interval, 4, lowest), "saturates")
		require.LessOrEqual(t, sweepDelay(interval, 4, highest)-sweepDelayLongest, time.Duration(sweepDelayLongest/4), "saturates below 1.25 of it")
	}
	for _, interval := range []time.Duration{1, 2, 3} {
		require.GreaterOrEqual(t, float64(sweepDelay(interval, 1, lowest)), 0.75*float64(interval), "%s", interval)
		require.Less(t, sweepDelay(interval, 1, highest), interval*5/4+1, "%s", interval)
	}
}

// TestSweeperLoopWaits: the sweeper sweeps at once, then waits its share:
// one sweeper of a million live workers does not sweep again within the
// interval, one alone does.
func TestSweeperLoopWaits(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	const interval = 20 * time.Millisecond
	sweeps := func(live int64) chan int {
		t.Helper()
		w, err := New(pool, &Config{Schema: schema, SweepInterval: interval})
		require.NoError(t, err)
		w.liveWorkers.Store(live)
		s := newSweeper(w)
		s.swept = make(chan int, 100)
		s.run(s.loop)
		t.Cleanup(s.stop)
		return s.swept
	}
	next := func(swept chan int, within time.Duration) bool {
		t.Helper()
		select {
		case n := <-swept:
			require.Zero(t, n, "nothing to repair")
			return true
		case <-time.After(within):
			return false
		}
	}

	alone, crowded := sweeps(1), sweeps(1_000_000)
	require.True(t, next(alone, 10*time.Second), "the first sweep at start")
	require.True(t, next(crowded, 10*time.Second), "the first sweep at start")
	require.True(t, next(alone, 10*time.Second), "alone, it sweeps again after about the interval")
	require.False(t, next(crowded, 50*interval), "crowded, it waits the interval times a million")
}
