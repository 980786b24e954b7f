package limit

import (
	"container/heap"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// store is a simulated database on a simulated clock: a commit takes base
// while at most knee commits are in flight, and past the knee the commits
// share its capacity, so each takes base × in flight / knee (throughput no
// longer grows; only latency does). Every latency varies by ±10%,
// deterministically.
type store struct {
	base     time.Duration
	knee     int
	now      time.Duration
	inFlight commits
	mine     map[*Limiter]int // in flight by limiter, in runShared
	rand     *rand.Rand
}

type commit struct {
	started, done time.Duration
	by            *Limiter // whose commit it is, in runShared
}

type commits []commit

func (c commits) Len() int           { return len(c) }
func (c commits) Less(i, j int) bool { return c[i].done < c[j].done }
func (c commits) Swap(i, j int)      { c[i], c[j] = c[j], c[i] }
func (c *commits) Push(x any)        { *c = append(*c, x.(commit)) }
func (c *commits) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

func newStore(knee int) *store {
	return &store{base: 2 * time.Millisecond, knee: knee, rand: rand.New(rand.NewPCG(1, uint64(knee)))}
}

// start begins a commit of limiter by with what is in flight now.
func (s *store) start(by *Limiter) {
	n := len(s.inFlight) + 1
	latency := float64(s.base) * max(1, float64(n)/float64(s.knee)) * (0.9 + 0.2*s.rand.Float64())
	heap.Push(&s.inFlight, commit{started: s.now, done: s.now + time.Duration(latency), by: by})
}

// runShared is run for limiters that share the store, each keeping as many
// commits in flight as it allows; it returns the sum of their limits after
// each commit.
func (s *store) runShared(ls []*Limiter, commits int) []int {
	if s.mine == nil {
		s.mine = map[*Limiter]int{}
	}
	sums := make([]int, 0, commits)
	for range commits {
		for _, l := range ls {
			for ; s.mine[l] < l.Limit(); s.mine[l]++ {
				s.start(l)
			}
		}
		c := heap.Pop(&s.inFlight).(commit)
		s.now = c.done
		s.mine[c.by]--
		c.by.Observe(c.done-c.started, 1, true)
		sum := 0
		for _, l := range ls {
			sum += l.Limit()
		}
		sums = append(sums, sum)
	}
	return sums
}

// run keeps as many commits in flight as l allows, with always more work
// waiting, for commits commits, and returns the limit after each.
func (s *store) run(l *Limiter, commits int) []int {
	limits := make([]int, 0, commits)
	for range commits {
		for len(s.inFlight) < l.Limit() {
			s.start(l)
		}
		c := heap.Pop(&s.inFlight).(commit)
		s.now = c.done
		l.Observe(c.done-c.started, 1, true)
		limits = append(limits, l.Limit())
	}
	return limits
}

// settled is the median and the range of the limit over the last half of
// limits.
func settled(limits []int) (median, low, high int) {
	last := slices.Clone(limits[len(limits)/2:])
	slices.Sort(last)
	return last[len(last)/2], last[0], last[len(last)-1]
}

// requireNearKnee checks that the limit settled near the knee: never below
// it by more than a quarter, and at most half again above it (the
// tolerance's worth of queueing).
func requireNearKnee(t *testing.T, limits []int, knee int) {
	t.Helper()
	median, low, high := settled(limits)
	t.Logf("knee %d: limit settled at %d (%d–%d)", knee, median, low, high)
	require.GreaterOrEqual(t, low, knee*3/4, "limit fell well below the knee %d", knee)
	require.LessOrEqual(t, high, knee*3/2+1, "limit stayed well above the knee %d", knee)
}

// TestLimiterSettlesNearTheKnee: from the same start (2) and cap (128), the
// limit settles near the knee whether that is at 4 or at 40 commits in
// flight.
func TestLimiterSettlesNearTheKnee(t *testing.T) {
	t.Parallel()
	for _, knee := range []int{4, 40} {
		l := New(2, 128)
		requireNearKnee(t, newStore(knee).run(l, 4000), knee)
	}
}

// sharing returns n limiters that share one store, each told so.
func sharing(n int) []*Limiter {
	ls := make([]*Limiter, n)
	for i := range ls {
		ls[i] = New(4, 128)
		ls[i].Share(n)
	}
	return ls
}

// TestLimitersSharingAStoreSettleNearItsKnee: limiters on one store (n
// processes on one database), each starting at its share of 4, settle with
// the sum of their limits near the store's knee and stay there: a limiter
// held at 1 while the others queue does not take their queueing for a
// slower store (unshared, the sums here rose to 34–79).
func TestLimitersSharingAStoreSettleNearItsKnee(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ knee, n int }{{8, 2}, {8, 4}, {40, 4}, {40, 8}} {
		ls := sharing(c.n)
		for _, l := range ls {
			require.Equal(t, max(1, 4/c.n), l.Limit())
		}
		t.Logf("%d limiters", c.n)
		requireNearKnee(t, newStore(c.knee).runShared(ls, 40000), c.knee)
	}
}

// TestLimitersJoiningALearnedOneSettleNearTheKnee: three limiters that join
// one which learned the store alone settle with it near the knee.
func TestLimitersJoiningALearnedOneSettleNearTheKnee(t *testing.T) {
	t.Parallel()
	s := newStore(40)
	first := New(4, 128)
	requireNearKnee(t, s.runShared([]*Limiter{first}, 4000), 40)
	ls := append(sharing(4)[1:], first)
	first.Share(4)
	requireNearKnee(t, s.runShared(ls, 40000), 40)
}

// TestSharedLimitersRelearnAStoreSlowerForGood: limiters sharing a store
// that became twice as slow, with half the room, relearn it and settle near
// its new knee rather than at 1 each.
func TestSharedLimitersRelearnAStoreSlowerForGood(t *testing.T) {
	t.Parallel()
	s := newStore(40)
	ls := sharing(4)
	requireNearKnee(t, s.runShared(ls, 8000), 40)
	s.base, s.knee = 2*s.base, 20
	requireNearKnee(t, s.runShared(ls, 40000), 20)
}

// TestLimiterShare: while it learns, a limiter shared by n processes holds
// its nth share of the initial limit (at least 1), and follows n as it
// changes; once it has learned, only latency moves it.
func TestLimiterShare(t *testing.T) {
	t.Parallel()
	l := New(8, 64)
	l.Share(4)
	require.Equal(t, 2, l.Limit())
	l.Share(16)
	require.Equal(t, 1, l.Limit())
	l.Share(1)
	require.Equal(t, 8, l.Limit())
	l.Share(0) // no other process seen yet: the whole of it
	require.Equal(t, 8, l.Limit())
	for range window {
		l.Observe(time.Millisecond, 1, false)
	}
	l.Share(4)
	require.Equal(t, 8, l.Limit())

	f := Fixed(8)
	f.Share(4)
	require.Equal(t, 8, f.Limit())
}

// TestLimiterFollowsAMovingKnee: when the knee moves down (the store got
// busier) the limit comes down to it, and when it moves back up the limit
// recovers.
func TestLimiterFollowsAMovingKnee(t *testing.T) {
	t.Parallel()
	l := New(4, 128)
	s := newStore(40)
	requireNearKnee(t, s.run(l, 4000), 40)
	s.knee = 4
	requireNearKnee(t, s.run(l, 4000), 4)
	s.knee = 40
	requireNearKnee(t, s.run(l, 4000), 40)
}

// TestLimiterStaysWithinItsBounds: a store with no knee in reach takes the
// limit to its cap and no further; one that became slower for good takes
// it to 1 and no lower, until the limiter relearned the no-load latency
// there, and then back to the cap.
func TestLimiterStaysWithinItsBounds(t *testing.T) {
	t.Parallel()
	l := New(4, 10)
	limits := newStore(1000).run(l, 2000)
	require.Equal(t, 10, slices.Max(limits))
	require.Equal(t, 10, limits[len(limits)-1])

	l = New(4, 10)
	s := newStore(1000)
	s.run(l, 500) // learns the no-load latency
	s.base *= 50  // then everything is slower, however little is in flight
	limits = s.run(l, 2000)
	require.Equal(t, 1, slices.Min(limits))
	require.Equal(t, 10, limits[len(limits)-1])
}

// TestLimiterGrowsOnlyWhenLimited: latency at the no-load level does not
// grow the limit unless work waited for a slot.
func TestLimiterGrowsOnlyWhenLimited(t *testing.T) {
	t.Parallel()
	l := New(3, 64)
	for range 1000 {
		l.Observe(time.Millisecond, 1, false)
	}
	require.Equal(t, 3, l.Limit())
	for range 1000 {
		l.Observe(time.Millisecond, 1, true)
	}
	require.Equal(t, 64, l.Limit())
}

// TestLimiterJudgesLatencyPerUnit: a group of 10 units that takes ten times
// as long as a lone unit did is as fast and leaves the limit; one that takes
// a hundred times as long is slower, and shrinks it.
func TestLimiterJudgesLatencyPerUnit(t *testing.T) {
	t.Parallel()
	l := New(8, 64)
	l.Observe(time.Millisecond, 1, false)
	for range 100 {
		l.Observe(10*time.Millisecond, 10, false)
	}
	require.Equal(t, 8, l.Limit())
	l.Observe(100*time.Millisecond, 10, false) // 10 ms per unit, against 1
	require.Less(t, l.Limit(), 8)
}

// TestFixedLimiter: a fixed limit ignores what it observes.
func TestFixedLimiter(t *testing.T) {
	t.Parallel()
	l := Fixed(2)
	for range 100 {
		l.Observe(time.Second, 1, true)
		l.Observe(time.Nanosecond, 1, true)
	}
	require.Equal(t, 2, l.Limit())
	require.Equal(t, 1, Fixed(0).Limit())
}

// TestLimiterLearnsBeforeMoving: a new limiter keeps its initial limit for
// its first window of observations, however their latency falls (a burst's
// cold start), and moves only after it.
func TestLimiterLearnsBeforeMoving(t *testing.T) {
	t.Parallel()
	l := New(4, 64)
	for i := range window - 1 {
		l.Observe(time.Duration(window-i)*time.Millisecond, 1, true)
		require.Equal(t, 4, l.Limit())
	}
	for range 2 * window {
		l.Observe(time.Millisecond, 1, true)
	}
	require.Greater(t, l.Limit(), 4)
}

// TestLimiterHoldsWhileLatencyFalls: latency that keeps falling (a store
// still warming) does not grow the limit; once it holds, the limit grows.
func TestLimiterHoldsWhileLatencyFalls(t *testing.T) {
	t.Parallel()
	l := New(4, 64)
	latency := float64(time.Second)
	for range 10 * window {
		latency *= 0.97
		l.Observe(time.Duration(latency), 1, true)
	}
	require.Equal(t, 4, l.Limit())
	for range 2 * window {
		l.Observe(time.Duration(latency), 1, true)
	}
	require.Greater(t, l.Limit(), 4)
}
