package engine_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/engine"
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
)

// event makes event id of history, at now.
func event(t *testing.T, id int64, now time.Time, attrs history.Attributes) history.Event {
	t.Helper()
	e, err := history.NewEvent(id, now, attrs)
	require.NoError(t, err)
	return e
}

// TestDecideContinues: a step that takes an activity's outcome and
// schedules the next activity appends its events, retires the activity
// resolved, moves the run's append point from where it found it (W4) with
// its task cleared, and can commit in a group.
func TestDecideContinues(t *testing.T) {
	t.Parallel()
	now := time.Now()
	run := engine.Run{ID: uuid.New(), NextEventID: 3, State: "running"}
	past := []history.Event{
		event(t, 1, now, &history.WorkflowStartedAttributes{Kind: "k", Args: []byte("{}"), RunID: "r", WorkflowID: "w", Generation: 1}),
		event(t, 2, now, &history.ActivityScheduledAttributes{Kind: "a", Args: []byte("{}")}),
	}
	appended := []history.Event{
		event(t, 3, now, &history.ActivityCompletedAttributes{ScheduledEventID: 2, Result: []byte("1"), Attempt: 1}),
		event(t, 4, now, &history.WorkflowTaskStartedAttributes{Attempt: 1}),
		event(t, 5, now, &history.ActivityScheduledAttributes{Kind: "a", Args: []byte("{}")}),
	}
	st, err := engine.Decide(engine.StepParams{Run: run, History: [][]history.Event{past}, Facts: engine.NewFacts(), Appended: appended,
		Outcome: replay.Outcome{Events: appended[1:]}, TaskJobID: 77})
	require.NoError(t, err)
	require.Equal(t, appended, st.Writes.Events)
	require.Equal(t, []int64{2}, st.Writes.Retired)
	require.Equal(t, &engine.RunCAS{Found: 3, Next: 6, ClearTask: 77}, st.Writes.CAS)
	require.False(t, st.Writes.AbandonUpdates)
	require.Empty(t, st.Closed)
	require.False(t, st.Alone)
	require.False(t, st.WritesAfter)
	require.Equal(t, engine.Pending{Activities: true}, st.Pending)
	st, err = engine.Decide(engine.StepParams{Run: run, History: [][]history.Event{past}, Appended: appended[:1], Outcome: replay.Outcome{}})
	require.NoError(t, err)
	require.Equal(t, engine.Pending{}, st.Pending, "the outcome appended resolves the activity")

	_, err = engine.Decide(engine.StepParams{Run: run, History: [][]history.Event{past}, Appended: appended[1:], Outcome: replay.Outcome{}})
	require.ErrorContains(t, err, "engine numbered event 4 where 3 was expected")
}

// TestDecideCloses: a closing step's CAS closes the run in the state its
// outcome says (its task dropped), rejects the updates still pending, and
// runs alone with writes after its last batch when the run has a parent
// or leaves activities pending.
func TestDecideCloses(t *testing.T) {
	t.Parallel()
	now := time.Now()
	past := []history.Event{
		event(t, 1, now, &history.WorkflowStartedAttributes{Kind: "k", Args: []byte("{}"), RunID: "r", WorkflowID: "w", Generation: 1}),
	}
	done := []history.Event{event(t, 2, now, &history.WorkflowCompletedAttributes{Result: []byte("42")})}
	for _, tc := range []struct {
		name    string
		outcome *replay.Outcome
		parent  bool
		close   *engine.RunClose
		alone   bool
	}{
		{name: "completed", outcome: &replay.Outcome{Completed: true, Result: []byte("42"), Events: done},
			close: &engine.RunClose{State: "completed", Result: []byte("42")}},
		{name: "failed", outcome: &replay.Outcome{Completed: true, Failure: &history.Failure{Message: "x"}, Events: done},
			close: &engine.RunClose{State: "failed", Failure: []byte(`{"message":"x"}`)}},
		{name: "cancelled", outcome: &replay.Outcome{Completed: true, Canceled: true, Failure: &history.Failure{Message: "x"}, Events: done},
			close: &engine.RunClose{State: "cancelled", Failure: []byte(`{"message":"x"}`)}},
		{name: "with a parent", outcome: &replay.Outcome{Completed: true, Result: []byte("42"), Events: done}, parent: true,
			close: &engine.RunClose{State: "completed", Result: []byte("42")}, alone: true},
		{name: "continued as new", outcome: &replay.Outcome{Completed: true, Events: done,
			ContinuedAsNew: &history.WorkflowContinuedAsNewAttributes{Kind: "k"}},
			close: &engine.RunClose{State: "continued_as_new"}, alone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := engine.Run{ID: uuid.New(), NextEventID: 2, HasParent: tc.parent}
			st, err := engine.Decide(engine.StepParams{Run: run, History: [][]history.Event{past}, Appended: done, Outcome: *tc.outcome, TaskJobID: 9})
			require.NoError(t, err)
			require.Equal(t, &engine.RunCAS{Found: 2, Next: 3, Close: tc.close}, st.Writes.CAS)
			require.Equal(t, tc.close.State, st.Closed)
			require.True(t, st.Writes.AbandonUpdates)
			require.Equal(t, tc.alone, st.Alone)
			require.Equal(t, tc.alone, st.WritesAfter)
		})
	}
}

// TestDecideAlone: a step that starts a timer or a child, cancels, or
// answers an update writes before its last batch: it never commits in a
// group.
func TestDecideAlone(t *testing.T) {
	t.Parallel()
	now := time.Now()
	run := engine.Run{ID: uuid.New(), NextEventID: 1}
	started := event(t, 1, now, &history.WorkflowStartedAttributes{Kind: "k", Args: []byte("{}"), RunID: "r", WorkflowID: "w", Generation: 1})
	timer := event(t, 2, now, &history.TimerStartedAttributes{})
	child := event(t, 2, now, &history.ChildWorkflowScheduledAttributes{Kind: "c", WorkflowID: "c"})
	for name, tc := range map[string]struct {
		events  []history.Event
		outcome *replay.Outcome
		check   func(*engine.Step) bool
	}{
		"timer":  {[]history.Event{started, timer}, &replay.Outcome{}, func(st *engine.Step) bool { return st.StartsTimer }},
		"child":  {[]history.Event{started, child}, &replay.Outcome{}, func(st *engine.Step) bool { return st.StartsChild }},
		"cancel": {[]history.Event{started}, &replay.Outcome{CanceledTimers: []int64{9}}, func(st *engine.Step) bool { return st.CancelsOrAnswers }},
	} {
		st, err := engine.Decide(engine.StepParams{Run: run, Appended: tc.events, Outcome: *tc.outcome})
		require.NoError(t, err, name)
		require.True(t, tc.check(&st), name)
		require.True(t, st.Alone, name)
	}
}

// TestDecideWritesCASInRoom: a step given room for its compare-and-swap
// writes it there, its close included, and a later step in the same room
// leaves nothing of the earlier one.
func TestDecideWritesCASInRoom(t *testing.T) {
	t.Parallel()
	now := time.Now()
	run := engine.Run{ID: uuid.New(), NextEventID: 2}
	done := []history.Event{event(t, 2, now, &history.WorkflowCompletedAttributes{Result: []byte("42")})}
	room := new(engine.CASRoom)
	closing, err := engine.Decide(engine.StepParams{Run: run, Appended: done, TaskJobID: 9, Room: room,
		Outcome: replay.Outcome{Completed: true, Result: []byte("42"), Events: done}})
	require.NoError(t, err)
	require.Equal(t, &engine.RunCAS{Found: 2, Next: 3, Close: &engine.RunClose{State: "completed", Result: []byte("42")}}, closing.Writes.CAS)
	require.Equal(t, "completed", closing.Closed)

	boundary := []history.Event{event(t, 2, now, &history.WorkflowTaskStartedAttributes{Attempt: 1})}
	next, err := engine.Decide(engine.StepParams{Run: run, Appended: boundary, TaskJobID: 9, Room: room,
		Outcome: replay.Outcome{Events: boundary}})
	require.NoError(t, err)
	require.Same(t, closing.Writes.CAS, next.Writes.CAS, "written in the room")
	require.Equal(t, &engine.RunCAS{Found: 2, Next: 3, ClearTask: 9}, next.Writes.CAS)
}
