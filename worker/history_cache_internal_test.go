package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

// cacheTestArgs are the args of the workflow of TestHistoryCacheCachedRuns.
type cacheTestArgs struct{}

func (cacheTestArgs) Kind() string { return "cache_test" }

type cacheTestActivity struct{}

func (cacheTestActivity) Kind() string { return "cache_test_activity" }

// newTestCachedRun starts a run of a workflow that waits for activities one
// after another and closes unwound when its code is unwound; it returns the
// session and the history it stands at.
func newTestCachedRun(t *testing.T) (*replay.CachedRun, []history.Event, chan struct{}) {
	t.Helper()
	unwound := make(chan struct{})
	def := &replay.Definition{Kind: cacheTestArgs{}.Kind(), Run: func(ctx workflow.Context, _ []byte) ([]byte, error) {
		defer close(unwound)
		for {
			if _, err := workflow.ExecuteActivity[int](ctx, cacheTestActivity{}, nil).Get(ctx); err != nil {
				return nil, err
			}
		}
	}}
	started, err := history.NewEvent(1, time.Now(), &history.WorkflowStartedAttributes{Kind: def.Kind, Args: []byte("{}"), RunID: "r", WorkflowID: "w", Generation: 1})
	require.NoError(t, err)
	out, session, err := replay.Start(context.Background(), def, &replay.ExecuteParams{History: []history.Event{started}, Now: time.Now()})
	require.NoError(t, err)
	require.NotNil(t, session)
	events := append([]history.Event{started}, out.Events...)
	t.Cleanup(session.Close)
	return session, events, unwound
}

func requireUnwound(t *testing.T, unwound chan struct{}) {
	t.Helper()
	select {
	case <-unwound:
	case <-time.After(10 * time.Second):
		t.Fatal("the session was not closed")
	}
}

func requireLive(t *testing.T, unwound chan struct{}) {
	t.Helper()
	select {
	case <-unwound:
		t.Fatal("the session was closed")
	default:
	}
}

// TestHistoryCacheCachedRuns: the cache hands a run's cached run only to a task
// at the append point the cached run stands at, and never to two tasks; a
// cached run it does not keep (standing elsewhere, shorter than what it
// holds, replaced, evicted, forgotten, or the worker stops) is closed, so
// its goroutines go.
func TestHistoryCacheCachedRuns(t *testing.T) {
	t.Parallel()

	t.Run("TakenOnceAtItsAppendPoint", func(t *testing.T) {
		t.Parallel()
		c := newHistoryCache(MaxCachedRunsDefault)
		run := uuid.New()
		session, events, unwound := newTestCachedRun(t)
		next := int64(len(events)) + 1
		c.put(run, one(events), nil, session, nil, 0)
		require.Nil(t, c.cachedRun(run, next-1), "a task at another append point")
		require.Nil(t, c.cachedRun(uuid.New(), next), "another run")
		require.Same(t, session, c.cachedRun(run, next))
		require.Nil(t, c.cachedRun(run, next), "taken already")
		_, _, ok := c.get(run, next)
		require.True(t, ok, "the history stays while the session is out")
		requireLive(t, unwound)
		c.put(run, one(events), nil, session, nil, 0) // its task did not move the run (say)
		require.Same(t, session, c.cachedRun(run, next))
	})

	t.Run("ClosedWhenNotKept", func(t *testing.T) {
		t.Parallel()
		c := newHistoryCache(MaxCachedRunsDefault)
		run := uuid.New()

		// Standing elsewhere than the history it comes with.
		session, events, unwound := newTestCachedRun(t)
		c.put(run, one(events[:len(events)-1]), nil, session, nil, 0)
		requireUnwound(t, unwound)
		require.Nil(t, c.cachedRun(run, int64(len(events))))

		// With a history shorter than the one held.
		long := []history.Event{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}, {ID: 5}, {ID: 6}, {ID: 7}, {ID: 8}}
		c.put(run, one(long), nil, nil, nil, 0)
		session, events, unwound = newTestCachedRun(t)
		c.put(run, one(events), nil, session, nil, 0)
		requireUnwound(t, unwound)

		// Replaced, then forgotten.
		c.forget(run)
		session, events, unwound = newTestCachedRun(t)
		c.put(run, one(events), nil, session, nil, 0)
		other, _, otherUnwound := newTestCachedRun(t)
		c.put(run, one(events), nil, other, nil, 0)
		requireUnwound(t, unwound)
		requireLive(t, otherUnwound)
		c.forget(run)
		requireUnwound(t, otherUnwound)

		// Forgotten at an append point: only if the entry is still there.
		session, events, unwound = newTestCachedRun(t)
		c.put(run, one(events), nil, session, nil, 0)
		c.forgetAt(run, int64(len(events))) // an older one: the entry is newer
		requireLive(t, unwound)
		c.forgetAt(run, int64(len(events))+1)
		requireUnwound(t, unwound)
		_, _, ok := c.get(run, int64(len(events))+1)
		require.False(t, ok)
	})

	t.Run("EvictedAndStopped", func(t *testing.T) {
		t.Parallel()
		c := newHistoryCache(1)
		first, events, firstUnwound := newTestCachedRun(t)
		firstRun := uuid.New()
		c.put(firstRun, one(events), nil, first, nil, 0)
		_, _, ok := c.get(firstRun, int64(len(events))+1) // the cache is used: it keeps sessions
		require.True(t, ok)
		second, events, secondUnwound := newTestCachedRun(t)
		c.put(uuid.New(), one(events), nil, second, nil, 0)
		requireUnwound(t, firstUnwound)
		requireLive(t, secondUnwound)
		c.closeCachedRuns()
		requireUnwound(t, secondUnwound)

		// A task that settles after the worker stopped (a first task in a
		// start that committed late) keeps no code alive.
		late, events, lateUnwound := newTestCachedRun(t)
		run := uuid.New()
		c.put(run, one(events), nil, late, nil, 0)
		requireUnwound(t, lateUnwound)
		_, _, ok = c.get(run, int64(len(events))+1)
		require.True(t, ok, "its history is kept")
		require.Nil(t, c.cachedRun(run, int64(len(events))+1))
	})

	t.Run("LeastRecentlyUsedLeavesFirst", func(t *testing.T) {
		t.Parallel()
		c := newHistoryCache(2)
		a, b := uuid.New(), uuid.New()
		sessionA, eventsA, unwoundA := newTestCachedRun(t)
		c.put(a, one(eventsA), nil, sessionA, nil, 0)
		sessionB, eventsB, unwoundB := newTestCachedRun(t)
		c.put(b, one(eventsB), nil, sessionB, nil, 0)
		_, _, ok := c.get(a, int64(len(eventsA))+1) // a task of a: a is used after b
		require.True(t, ok)
		_, eventsC, _ := newTestCachedRun(t)
		c.put(uuid.New(), one(eventsC), nil, nil, nil, 0)
		requireUnwound(t, unwoundB)
		requireLive(t, unwoundA)
		require.Same(t, sessionA, c.cachedRun(a, int64(len(eventsA))+1))
		_, _, ok = c.get(b, int64(len(eventsB))+1)
		require.False(t, ok, "b left the cache")
	})

	// A decision kept for a rerun alone is taken only by a task at the
	// append point it was decided at, with the same inputs, once; any other
	// closes its session, and so does its entry going (the run's next
	// commit, eviction, Stop).
	t.Run("DecisionsKeptForTheRerun", func(t *testing.T) {
		t.Parallel()
		inputs := []history.Event{{Type: history.EventActivityCompleted, Attributes: []byte(`{"scheduled_event_id":3}`)}}
		other := []history.Event{{Type: history.EventActivityCompleted, Attributes: []byte(`{"scheduled_event_id":3,"result":1}`)}}
		c := newHistoryCache(MaxCachedRunsDefault)
		run := uuid.New()
		_, events, _ := newTestCachedRun(t)
		next := int64(len(events)) + 1
		c.put(run, one(events), nil, nil, nil, 0)
		keep := func(at int64) (*decidedTask, chan struct{}) {
			session, _, unwound := newTestCachedRun(t)
			d := &decidedTask{inputs: inputs, outcome: &replay.Outcome{}, cached: session}
			c.keepDecision(run, at, d)
			return d, unwound
		}

		d, unwound := keep(next)
		require.Same(t, d, c.decision(run, next, inputs))
		require.Nil(t, c.decision(run, next, inputs), "taken once")
		requireLive(t, unwound)

		_, unwound = keep(next - 1) // the entry is not at its append point
		requireUnwound(t, unwound)
		for _, in := range [][]history.Event{other, nil} {
			_, unwound = keep(next)
			require.Nil(t, c.decision(run, next, in))
			requireUnwound(t, unwound)
		}
		_, unwound = keep(next)
		require.Nil(t, c.decision(run, next+1, inputs), "the run moved")
		requireUnwound(t, unwound)

		_, first := keep(next)
		_, second := keep(next) // replaces the first
		requireUnwound(t, first)
		c.put(run, one(events), nil, nil, nil, 0) // the run's next commit
		requireUnwound(t, second)
		_, unwound = keep(next)
		c.forget(run)
		requireUnwound(t, unwound)

		c.put(run, one(events), nil, nil, nil, 0)
		_, unwound = keep(next)
		c.closeCachedRuns()
		requireUnwound(t, unwound)
		_, late := keep(next)
		requireUnwound(t, late)
		require.Nil(t, c.decision(run, next, inputs))
	})

	t.Run("AnEntryReplacedEvictsNoOther", func(t *testing.T) {
		t.Parallel()
		c := newHistoryCache(2)
		run := uuid.New()
		other, events, otherUnwound := newTestCachedRun(t)
		c.put(run, one(events), nil, nil, nil, 0)
		c.put(uuid.New(), one(events), nil, other, nil, 0)
		for range 10 {
			c.put(run, one(events), nil, nil, nil, 0) // full, but run has its entry already
		}
		requireLive(t, otherUnwound)
	})

	t.Run("NoneKeptWhenTheCacheIsOff", func(t *testing.T) {
		t.Parallel()
		c := newHistoryCache(-1)
		run := uuid.New()
		session, events, unwound := newTestCachedRun(t)
		c.put(run, one(events), nil, session, nil, 0)
		requireUnwound(t, unwound)
		_, _, ok := c.get(run, int64(len(events))+1)
		require.False(t, ok)
	})
}

// TestHistoryCacheSharesHistory: what a task appends to the history the
// cache handed it (to its list of pieces, or to a piece) is not the cache's.
func TestHistoryCacheSharesHistory(t *testing.T) {
	t.Parallel()
	c := newHistoryCache(MaxCachedRunsDefault)
	run := uuid.New()
	events := make([]history.Event, 3, 10)
	for i := range events {
		events[i].ID = int64(i) + 1
	}
	pieces := make([][]history.Event, 1, 4) // room to append in place
	pieces[0] = events[:3:3]                // as put takes them: no room
	c.put(run, pieces, &runRow{}, nil, nil, 0)
	got, _, ok := c.get(run, 4)
	require.True(t, ok)
	_ = append(got, []history.Event{{ID: 4}})
	_ = append(got[0], history.Event{ID: 4})
	latest, _, _, ok := c.latest(run)
	require.True(t, ok)
	_ = append(latest, history.Event{ID: 4})
	require.Nil(t, pieces[:2][1], "the cache's pieces are as put")
	require.Equal(t, history.Event{}, events[:4][3], "the cache's events are as put")
	got, _, ok = c.get(run, 4)
	require.True(t, ok)
	require.Len(t, flat(got), 3)
}

// BenchmarkHistoryCacheGet measures a task's read of its run's cached
// history of 1,000 events.
func BenchmarkHistoryCacheGet(b *testing.B) {
	c := newHistoryCache(MaxCachedRunsDefault)
	run := uuid.New()
	events := make([]history.Event, 1000)
	for i := range events {
		events[i].ID = int64(i) + 1
	}
	c.put(run, one(events), nil, nil, nil, 0)
	b.ReportAllocs()
	for b.Loop() {
		got, _, ok := c.get(run, int64(len(events))+1)
		require.True(b, ok)
		require.Len(b, flat(got), len(events))
	}
}

// TestHistoryCacheRoom: runs in flight (busy entries, admitted tasks) take
// the cache's room; an entry stops being busy once the attempts its task
// claimed ended, or when it leaves; a task of a run the cache holds needs
// no room; and busy entries are evicted last.
func TestHistoryCacheRoom(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := newHistoryCache(2)
	events := []history.Event{{ID: 1, Type: "WorkflowStarted"}}
	a, b, other := uuid.New(), uuid.New(), uuid.New()
	busyA := c.put(a, one(events), nil, nil, nil, 2)
	require.True(t, c.admit())
	require.False(t, c.admit(), "a busy entry and an admitted task fill a cache of 2")
	release, err := c.await(ctx, a, time.Nanosecond)
	require.NoError(t, err, "a run the cache holds needs no room")
	release()
	_, err = c.await(ctx, other, 50*time.Millisecond)
	require.ErrorIs(t, err, context.DeadlineExceeded, "a task waits for room as long as its patience")
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = c.await(short, other, time.Hour)
	require.ErrorIs(t, err, context.DeadlineExceeded, "or until its context ends")

	waited := make(chan error, 1)
	go func() {
		release, err := c.await(ctx, other, time.Hour)
		if err == nil {
			release()
		}
		waited <- err
	}()
	c.claimEnded(busyA, 2)
	select {
	case err := <-waited:
		t.Fatalf("room with one of two claims ended: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	c.claimEnded(busyA, 2)
	require.NoError(t, <-waited, "room once both claims ended")
	c.release() // the admitted task settled

	c.put(a, one(events), nil, nil, nil, 1)
	c.put(b, one(events), nil, nil, nil, 0)
	c.put(other, one(events), nil, nil, nil, 0) // evicts b, the idle one, not a
	_, _, ok := c.get(a, 2)
	require.True(t, ok, "the busy entry stays")
	_, _, ok = c.get(b, 2)
	require.False(t, ok)
	require.True(t, c.admit())
	require.False(t, c.admit())
	c.forget(a)
	require.True(t, c.admit(), "a busy entry that leaves frees its room")
}

// TestHistoryCacheRoomInOrder: those awaiting room (reserve, await) are
// admitted oldest first, one per room freed; one whose ctx ends leaves the
// queue, and room admitted to it as its ctx ended goes to the next; a busy
// entry replaced by a busy one (a run that goes on) frees no room.
func TestHistoryCacheRoomInOrder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := newHistoryCache(1)
	events := []history.Event{{ID: 1, Type: "WorkflowStarted"}}
	run := uuid.New()
	c.put(run, one(events), nil, nil, nil, 1)

	const waiters = 3
	admitted := make(chan int, waiters)
	cancelled, cancel := context.WithCancel(ctx)
	gone := make(chan error, 1)
	for i := range waiters {
		waitCtx := ctx
		if i == 1 {
			waitCtx = cancelled
		}
		go func() {
			release, err := c.reserve(waitCtx)
			if err != nil {
				gone <- err
				return
			}
			admitted <- i
			<-ctx.Done()
			release()
		}()
		require.Eventually(t, func() bool { // queued in this order
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.waiting[roomForStart].Len() == i+1
		}, 10*time.Second, time.Millisecond)
	}

	// The run goes on: its next entry is busy too, so nobody is admitted,
	// not even once the first task's attempt ends (the entry is replaced
	// in place: it holds only the second task's).
	busy := c.put(run, one(append(events, history.Event{ID: 2})), nil, nil, nil, 1)
	c.claimEnded(busy, 2)
	select {
	case i := <-admitted:
		t.Fatalf("waiter %d admitted while the run that held the room went on", i)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	require.ErrorIs(t, <-gone, context.Canceled)
	c.claimEnded(busy, 3)
	require.Equal(t, 0, <-admitted, "the oldest is admitted first")
	select {
	case i := <-admitted:
		t.Fatalf("waiter %d admitted with the one room taken", i)
	case <-time.After(50 * time.Millisecond):
	}
	c.mu.Lock()
	require.Equal(t, 1, c.waiting[roomForStart].Len(), "the cancelled waiter left the queue")
	c.mu.Unlock()
}

// TestHistoryCacheTasksBeforeStarts: a task of a run started already that
// awaits room is admitted before the starts that waited longer: finishing
// runs in flight frees room, starting new ones only takes it.
func TestHistoryCacheTasksBeforeStarts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := newHistoryCache(1)
	busy := c.put(uuid.New(), one([]history.Event{{ID: 1, Type: "WorkflowStarted"}}), nil, nil, nil, 1)

	admitted := make(chan string, 2)
	wait := func(what string, queued func() bool, admit func() (func(), error)) {
		go func() {
			release, err := admit()
			if err != nil {
				return
			}
			admitted <- what
			<-ctx.Done()
			release()
		}()
		require.Eventually(t, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return queued()
		}, 10*time.Second, time.Millisecond)
	}
	wait("start", func() bool { return c.waiting[roomForStart].Len() == 1 }, func() (func(), error) { return c.reserve(ctx) })
	wait("task", func() bool { return c.waiting[roomForTask].Len() == 1 }, func() (func(), error) { return c.await(ctx, uuid.New(), time.Hour) })
	require.False(t, c.admit(), "a start takes no room while others await it")
	c.claimEnded(busy, 2)
	require.Equal(t, "task", <-admitted)
	select {
	case what := <-admitted:
		t.Fatalf("%s admitted with the one room taken", what)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestStageHistory: the history a task stages for the cache is the run's
// history's pieces as they are, then the task's events as one more piece,
// with their times as the database returns them (microseconds, local
// time); the task's events whose times are already so are staged as they
// are, with no room to append in place.
func TestStageHistory(t *testing.T) {
	t.Parallel()

	stored := time.UnixMicro(time.Now().UnixMicro())
	precise := time.Now() // nanoseconds, and a monotonic reading
	events := func(from int64, at time.Time, n int) []history.Event {
		var out []history.Event
		for i := range n {
			out = append(out, history.Event{ID: from + int64(i), Type: history.EventWorkflowTaskStarted, Time: at, Attributes: []byte("{}")})
		}
		return out
	}
	run := &runRow{}
	for _, c := range []struct {
		name     string
		pieces   [][]history.Event
		appended []history.Event
		shared   bool
	}{
		{name: "FirstTaskAsStored", appended: events(1, stored, 3), shared: true},
		{name: "FirstTaskPrecise", appended: events(1, precise, 3)},
		{name: "LaterTaskAsStored", pieces: one(events(1, stored, 3)), appended: events(4, stored, 2), shared: true},
		{name: "LaterTaskPrecise", pieces: [][]history.Event{events(1, stored, 3), events(4, stored, 1)}, appended: events(5, precise, 2)},
	} {
		t.Run(c.name, func(t *testing.T) {
			var result taskResult
			stageHistory(&result, run, c.pieces, c.appended, false)
			require.Len(t, result.history, len(c.pieces)+1)
			for i, piece := range c.pieces {
				require.Same(t, &piece[0], &result.history[i][0], "piece %d shared", i)
			}
			last := result.history[len(c.pieces)]
			require.Equal(t, c.shared, &last[0] == &c.appended[0], "shared")
			for i, e := range flat(result.history) {
				require.Equal(t, int64(i)+1, e.ID)
				require.Equal(t, time.UnixMicro(e.Time.UnixMicro()), e.Time, "event %d's time as stored", e.ID)
			}
			require.Equal(t, len(last), cap(last), "room to append in place")
			if !c.shared {
				require.Equal(t, precise, c.appended[0].Time, "the task's own events unchanged")
			}
			var closed taskResult
			stageHistory(&closed, run, c.pieces, c.appended, true)
			require.Nil(t, closed.history, "a closed run's history is not kept")
		})
	}
}

// one is a history of one piece.
func one(events []history.Event) [][]history.Event { return [][]history.Event{events} }

// BenchmarkCachedHistorySteps measures what the run cache allocates for
// the history of a run of n steps, each of which reads the run's cached
// history, stages it with its three events (an outcome, a boundary, the
// next activity's schedule) and puts it back once committed.
func BenchmarkCachedHistorySteps(b *testing.B) {
	stored := time.UnixMicro(time.Now().UnixMicro())
	for _, n := range []int{3, 50} {
		b.Run(fmt.Sprintf("Steps=%d", n), func(b *testing.B) {
			c := newHistoryCache(MaxCachedRunsDefault)
			run := &runRow{scanned: true}
			b.ReportAllocs()
			for b.Loop() {
				run.ID = uuid.New()
				for step := range n {
					appended := make([]history.Event, 3)
					for i := range appended {
						appended[i] = history.Event{ID: int64(3*step + i + 1), Type: history.EventWorkflowTaskStarted, Time: stored}
					}
					var pieces [][]history.Event
					if step > 0 {
						var ok bool
						pieces, _, ok = c.get(run.ID, int64(3*step+1))
						require.True(b, ok)
					}
					var result taskResult
					stageHistory(&result, run, pieces, appended, false)
					c.put(run.ID, result.history, nil, nil, result.facts, 0)
				}
				c.forget(run.ID)
			}
		})
	}
}
