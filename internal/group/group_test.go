package group

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/limit"
)

// member is a test member: its key, and what happened to it.
type member struct {
	key     string
	fail    bool // its group fails when it is in one with others
	grouped int  // the size of the group that committed it
	alone   bool // it ran alone after its group
}

// recorder is a Committer over members whose commits are recorded, and
// whose groups wait for release while gate is set.
type recorder struct {
	*Committer[string, *member]
	mu     sync.Mutex
	groups [][]string
	gate   chan struct{}
}

func newRecorder(n int) *recorder {
	r := &recorder{}
	r.Committer = New(Config[string, *member]{
		Limit: limit.Fixed(n), Size: 3,
		Key: func(m *member) string { return m.key },
		Commit: func(members []*member) (int, []bool) {
			if r.gate != nil {
				<-r.gate
			}
			r.mu.Lock()
			var keys []string
			for _, m := range members {
				keys = append(keys, m.key)
			}
			r.groups = append(r.groups, keys)
			r.mu.Unlock()
			alone := make([]bool, len(members))
			for _, m := range members {
				if m.fail && len(members) > 1 {
					for i := range alone {
						alone[i] = true
					}
					return 0, alone
				}
			}
			for _, m := range members {
				m.grouped = len(members)
			}
			return len(members), nil
		},
		Alone:   func(_ context.Context, m *member) { m.alone = true },
		HasRoom: func() bool { return true },
	})
	return r
}

// waitQueued waits until n members wait for a group.
func waitQueued(t *testing.T, r *recorder, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return queued(r) == n }, 10*time.Second, time.Millisecond)
}

func queued(r *recorder) int {
	n, _ := r.Stats()
	return n
}

func held(r *recorder) int {
	_, n := r.Stats()
	return n
}

// TestQueuedMemberLeavesOnCancel: a member queued for a group (none can
// start: every slot is in flight) returns its context's error once that
// ends, and leaves the queue, so no group takes it later.
func TestQueuedMemberLeavesOnCancel(t *testing.T) {
	t.Parallel()
	r := newRecorder(1)
	r.gate = make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(t, r.Do(t.Context(), &member{key: "busy"})) })
	require.Eventually(t, func() bool { return held(r) == 1 }, 10*time.Second, time.Millisecond)
	ctx, cancel := context.WithCancel(t.Context())
	errs := make(chan error, 1)
	left := &member{key: "left"}
	go func() { errs <- r.Do(ctx, left) }()
	waitQueued(t, r, 1)
	cancel()
	require.ErrorIs(t, <-errs, context.Canceled)
	require.Zero(t, queued(r))
	close(r.gate)
	wg.Wait()
	require.Equal(t, [][]string{{"busy"}}, r.groups, "the member that left was never committed")
	require.Zero(t, held(r))
}

// TestGroupTakesOneMemberPerKey: members queued behind a group in flight
// go in the next group, at most Size of them and one per key; a second
// member of a key waits for the first one's group.
func TestGroupTakesOneMemberPerKey(t *testing.T) {
	t.Parallel()
	r := newRecorder(1)
	r.gate = make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(t, r.Do(t.Context(), &member{key: "first"})) })
	require.Eventually(t, func() bool { return held(r) == 1 }, 10*time.Second, time.Millisecond)
	members := []*member{{key: "a"}, {key: "a"}, {key: "b"}, {key: "c"}, {key: "d"}}
	for i, m := range members {
		wg.Go(func() { require.NoError(t, r.Do(t.Context(), m)) })
		waitQueued(t, r, i+1)
	}
	close(r.gate)
	wg.Wait()
	require.Equal(t, [][]string{{"first"}, {"a", "b", "c"}, {"a", "d"}}, r.groups)
	require.Zero(t, held(r))
}

// TestFailedGroupRunsEachMemberAlone: a group that fails leaves every
// member to run alone, with its key held until it did: a member of the
// same key that queued meanwhile waits for that.
func TestFailedGroupRunsEachMemberAlone(t *testing.T) {
	t.Parallel()
	r := newRecorder(1)
	r.gate = make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(t, r.Do(t.Context(), &member{key: "first"})) })
	require.Eventually(t, func() bool { return held(r) == 1 }, 10*time.Second, time.Millisecond)
	members := []*member{{key: "a"}, {key: "b", fail: true}}
	for i, m := range members {
		wg.Go(func() { require.NoError(t, r.Do(t.Context(), m)) })
		waitQueued(t, r, i+1)
	}
	close(r.gate)
	wg.Wait()
	for _, m := range members {
		require.True(t, m.alone, "member %s ran alone", m.key)
		require.Zero(t, m.grouped)
	}
	require.Zero(t, held(r))
}

// TestHeldKeyWaits: no group takes a member of a key held outside any
// group until it is released; members of other keys go on.
func TestHeldKeyWaits(t *testing.T) {
	t.Parallel()
	r := newRecorder(2)
	r.Hold("held")
	var wg sync.WaitGroup
	waits := &member{key: "held"}
	wg.Go(func() { require.NoError(t, r.Do(t.Context(), waits)) })
	waitQueued(t, r, 1)
	require.NoError(t, r.Do(t.Context(), &member{key: "other"}))
	waitQueued(t, r, 1)
	r.Release("held")
	wg.Wait()
	require.Equal(t, 1, waits.grouped)
	require.Zero(t, held(r))
}

// drain queues n members at once on a Committer whose limit is fixed at
// limitN and whose cap is size (0: MaxSize), runs its groups one after
// another, and returns their sizes in launch order.
func drain(t *testing.T, n, limitN, size int) []int {
	t.Helper()
	var (
		sizes   []int
		pending []func()
	)
	c := New(Config[int, int]{
		Limit: limit.Fixed(limitN), Size: size,
		Key:     func(m int) int { return m },
		Commit:  func(members []int) (int, []bool) { sizes = append(sizes, len(members)); return len(members), nil },
		Alone:   func(context.Context, int) { t.Error("no member runs alone") },
		HasRoom: func() bool { return true },
		Go:      func(f func()) { pending = append(pending, f) },
	})
	c.mu.Lock()
	for m := range n {
		c.queue = append(c.queue, newWaiter(m))
	}
	c.launchLocked()
	c.mu.Unlock()
	for len(pending) > 0 {
		f := pending[0]
		pending = pending[1:]
		f()
	}
	queuedN, heldN := c.Stats()
	require.Zero(t, queuedN, "every member went in a group")
	require.Zero(t, heldN)
	return sizes
}

// TestGroupSizeFollowsLoad: a group launched takes every member queued,
// up to the cap; members that arrive while the groups allowed are in
// flight make the next group, as large as they are many.
func TestGroupSizeFollowsLoad(t *testing.T) {
	t.Parallel()
	require.Equal(t, []int{3}, drain(t, 3, 4, 0))
	require.Equal(t, []int{100}, drain(t, 100, 1, 0))
	require.Equal(t, []int{MaxSize, MaxSize, MaxSize, 1000 - 3*MaxSize}, drain(t, 1000, 2, 0))
	require.Equal(t, []int{3, 3, 3, 1}, drain(t, 10, 1, 3))

	var (
		sizes   []int
		pending []func()
	)
	c := New(Config[int, int]{
		Limit:   limit.Fixed(1),
		Key:     func(m int) int { return m },
		Commit:  func(members []int) (int, []bool) { sizes = append(sizes, len(members)); return len(members), nil },
		Alone:   func(context.Context, int) { t.Error("no member runs alone") },
		HasRoom: func() bool { return true },
		Go:      func(f func()) { pending = append(pending, f) },
	})
	queue := func(from, n int) {
		c.mu.Lock()
		for m := from; m < from+n; m++ {
			c.queue = append(c.queue, newWaiter(m))
		}
		c.launchLocked()
		c.mu.Unlock()
	}
	queue(0, 2) // a group of 2 in flight, the one allowed
	queue(2, 5) // these wait for it
	require.Len(t, pending, 1)
	pending[0]() // the first group commits and launches the next
	queue(7, 1)
	pending[1]()
	pending[2]()
	require.Equal(t, []int{2, 5, 1}, sizes)
}
