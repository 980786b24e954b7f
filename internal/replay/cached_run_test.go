package replay_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

// sequentialDefinition is a workflow of n sequential activities that counts
// how many times its code started (from the beginning: a replay) in *starts,
// and whose deferred call, run when its coroutine is unwound, closes
// unwound (if not nil).
func sequentialDefinition(n int, starts *int, unwound chan struct{}) *replay.Definition {
	return define(func(ctx workflow.Context, args OrderArgs) (int, error) {
		*starts++
		if unwound != nil {
			defer close(unwound)
		}
		total := 0
		for step := range n {
			v, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID, Step: step}, nil).Get(ctx)
			if err != nil {
				return 0, err
			}
			total += v
		}
		return total, nil
	})
}

// startSession runs the first task of a run of def on a new session
// (closed when the test ends), for a test that drives the session itself:
// the run's history is still its WorkflowStarted event alone.
func startSession(t *testing.T, def *replay.Definition, info replay.Info) (*run, *replay.Outcome, *replay.CachedRun) {
	t.Helper()
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.replayOnly = true
	out, session, err := replay.Start(context.Background(), def, &replay.ExecuteParams{History: r.history, Now: taskTime(1), Info: info})
	require.NoError(t, err)
	require.NotNil(t, session)
	t.Cleanup(session.Close)
	return r, out, session
}

func TestCachedRun(t *testing.T) {
	t.Parallel()

	t.Run("RunsTheCodeOnceAcrossTasks", func(t *testing.T) {
		t.Parallel()

		starts := 0
		def := sequentialDefinition(3, &starts, nil)
		r := newRun(t, def, OrderArgs{ID: "o-1"})
		r.replayOnly = true // this test drives the session itself
		params := &replay.ExecuteParams{History: r.history, Now: taskTime(1), Info: replay.Info{TaskAttempt: 1}}
		out, session, err := replay.Start(context.Background(), def, params)
		require.NoError(t, err)
		defer session.Close()
		r.history = append(r.history, out.Events...)
		require.Equal(t, int64(len(r.history))+1, session.NextEventID())
		for task := 2; !out.Completed; task++ {
			params := &replay.ExecuteParams{
				History: r.history, Inputs: []history.Event{completed(t, out.Activities[0].EventID, task)},
				Now: taskTime(task), Info: replay.Info{TaskAttempt: 1},
			}
			out, err = session.Continue(context.Background(), params)
			require.NoError(t, err)
			r.history = append(r.history, out.Events...)
		}
		require.Equal(t, 2+3+4, decodeResult[int](t, out))
		require.Equal(t, 1, starts, "the session replayed the code")
		require.Zero(t, session.NextEventID(), "the session ended with its run")
		_, err = session.Continue(context.Background(), params)
		require.Error(t, err, "a closed session continues nothing")

		// The same history, replayed: the code starts again at every task.
		starts = 0
		require.NoError(t, replay.Replay(context.Background(), def, &replay.ExecuteParams{History: r.history}))
		require.Equal(t, 1, starts)
		replayed := newRun(t, def, OrderArgs{ID: "o-1"})
		replayed.replayOnly = true
		starts = 0
		out = replayed.task()
		for !out.Completed {
			out = replayed.task(completed(t, out.Activities[0].EventID, 1))
		}
		require.Equal(t, 4, starts, "Execute replays the code at every task")
	})

	t.Run("ContinueIntoWritesOverTheCallersOutcome", func(t *testing.T) {
		t.Parallel()

		starts := 0
		def := sequentialDefinition(2, &starts, nil)
		r, out, session := startSession(t, def, replay.Info{TaskAttempt: 1})
		r.history = append(r.history, out.Events...)
		params := &replay.ExecuteParams{
			History: r.history, Inputs: []history.Event{completed(t, out.Activities[0].EventID, 2)},
			Now: taskTime(2), Info: replay.Info{TaskAttempt: 1},
		}
		// What an earlier task left in it goes: the outcome is this task's alone.
		into := &replay.Outcome{Completed: true, Result: []byte("1"), CanceledTimers: []int64{9}, Dropped: make([]replay.DroppedInput, 1)}
		got, err := session.ContinueInto(context.Background(), params, into)
		require.NoError(t, err)
		require.Same(t, into, got)
		require.False(t, got.Completed)
		require.Nil(t, got.Result)
		require.Empty(t, got.CanceledTimers)
		require.Empty(t, got.Dropped)
		require.Len(t, got.Activities, 1, "the second activity")
		require.Equal(t, history.EventActivityScheduled, got.Events[len(got.Events)-1].Type)
	})

	t.Run("StartIntoWritesOverTheCallersOutcome", func(t *testing.T) {
		t.Parallel()

		starts := 0
		def := sequentialDefinition(2, &starts, nil)
		r := newRun(t, def, OrderArgs{ID: "o-1"})
		r.replayOnly = true
		want, session, err := replay.Start(context.Background(), def, &replay.ExecuteParams{History: r.history, Now: taskTime(1)})
		require.NoError(t, err)
		session.Close()
		// What an earlier task left in it goes: the outcome is this task's alone.
		into := &replay.Outcome{Completed: true, Result: []byte("1"), CanceledTimers: []int64{9}, Dropped: make([]replay.DroppedInput, 1)}
		session, err = replay.StartInto(context.Background(), def, &replay.ExecuteParams{History: r.history, Now: taskTime(1)}, into)
		require.NoError(t, err)
		defer session.Close()
		require.Equal(t, want, into)
		require.Equal(t, int64(len(r.history)+len(into.Events))+1, session.NextEventID())
	})

	t.Run("HistoryItDidNotDecideIsRefused", func(t *testing.T) {
		t.Parallel()

		starts := 0
		unwound := make(chan struct{})
		def := sequentialDefinition(3, &starts, unwound)
		r, out, session := startSession(t, def, replay.Info{})
		// Its events never committed: history is still one event long.
		_, err := session.Continue(context.Background(), &replay.ExecuteParams{
			History: r.history, Inputs: []history.Event{completed(t, out.Activities[0].EventID, 1)}, Now: taskTime(2),
		})
		require.ErrorIs(t, err, replay.ErrCachedRunMismatch)
		require.ErrorContains(t, err, "it stands at event 3, the history has 1 events")
		require.Zero(t, session.NextEventID())
		<-unwound // closed: the code's coroutine was unwound

		// A history as long as the session's, ending otherwise.
		unwound = make(chan struct{})
		def = sequentialDefinition(3, &starts, unwound)
		r, out, session = startSession(t, def, replay.Info{})
		other := append(slices.Clone(r.history), out.Events...)
		other[len(other)-1].Type = history.EventTimerStarted
		_, err = session.Continue(context.Background(), &replay.ExecuteParams{
			History: other, Inputs: []history.Event{completed(t, out.Activities[0].EventID, 1)}, Now: taskTime(2),
		})
		require.ErrorIs(t, err, replay.ErrCachedRunMismatch)
		require.ErrorContains(t, err, "its event 3 is ActivityScheduled, the history's TimerStarted")
		<-unwound
	})

	t.Run("FailedTaskClosesIt", func(t *testing.T) {
		t.Parallel()

		starts := 0
		unwound := make(chan struct{})
		def := sequentialDefinition(3, &starts, unwound)
		r, out, session := startSession(t, def, replay.Info{})
		r.history = append(r.history, out.Events...)
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the task's deadline passed, say
		_, err := session.Continue(ctx, &replay.ExecuteParams{
			History: r.history, Inputs: []history.Event{completed(t, out.Activities[0].EventID, 1)}, Now: taskTime(2),
		})
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, session.NextEventID())
		<-unwound
	})

	t.Run("FailureInTheCodeClosesIt", func(t *testing.T) {
		t.Parallel()

		unwound := make(chan struct{})
		def := define(func(ctx workflow.Context, args OrderArgs) (int, error) {
			defer close(unwound)
			v, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{}, nil).Get(ctx)
			if err != nil {
				return 0, err
			}
			if v == 13 {
				panic("unlucky result")
			}
			return v, nil
		})
		r, out, session := startSession(t, def, replay.Info{})
		r.history = append(r.history, out.Events...)
		_, err := session.Continue(context.Background(), &replay.ExecuteParams{
			History: r.history, Inputs: []history.Event{completed(t, out.Activities[0].EventID, 13)}, Now: taskTime(2),
		})
		var panicErr *workflow.PanicError
		require.ErrorAs(t, err, &panicErr)
		require.Zero(t, session.NextEventID())
		<-unwound
	})

	t.Run("LiveVersionErrorNamesItsTask", func(t *testing.T) {
		t.Parallel()

		// The code asks for change "c" again with a range that excludes the
		// version it recorded: the task fails, naming its own boundary,
		// whether the code was replayed or continued (the harness checks
		// that both say the same).
		def := define(func(ctx workflow.Context, args OrderArgs) (int, error) {
			workflow.GetVersion(ctx, "c", workflow.DefaultVersion, 1)
			if _, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{}, nil).Get(ctx); err != nil {
				return 0, err
			}
			workflow.GetVersion(ctx, "c", 2, 2)
			return 0, nil
		})
		r := newRun(t, def, OrderArgs{ID: "o-1"})
		out := r.task()
		_, err := r.try(completed(t, out.Activities[0].EventID, 1))
		var ndErr *workflow.NonDeterminismError
		require.ErrorAs(t, err, &ndErr)
		require.Equal(t, int64(len(r.history))+2, ndErr.EventID, "the task's WorkflowTaskStarted")
	})

	t.Run("TaskAttemptIsTheTasks", func(t *testing.T) {
		t.Parallel()

		var attempts []int
		def := define(func(ctx workflow.Context, args OrderArgs) (int, error) {
			for range 2 {
				attempts = append(attempts, workflow.GetInfo(ctx).TaskAttempt)
				if _, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{}, nil).Get(ctx); err != nil {
					return 0, err
				}
			}
			return 0, nil
		})
		r, out, session := startSession(t, def, replay.Info{TaskAttempt: 1})
		r.history = append(r.history, out.Events...)
		out, err := session.Continue(context.Background(), &replay.ExecuteParams{
			History: r.history, Inputs: []history.Event{completed(t, out.Activities[0].EventID, 1)},
			Now: taskTime(2), Info: replay.Info{TaskAttempt: 7},
		})
		require.NoError(t, err)
		require.Equal(t, []int{1, 7}, attempts)
		require.Equal(t, history.EventWorkflowTaskStarted, out.Events[1].Type)
		attrs, err := history.DecodeAttributes(out.Events[1])
		require.NoError(t, err)
		require.Equal(t, 7, attrs.(*history.WorkflowTaskStartedAttributes).Attempt)
	})

	t.Run("NoSessionForARunThatEnded", func(t *testing.T) {
		t.Parallel()

		def := define(func(ctx workflow.Context, args OrderArgs) (int, error) { return 42, nil })
		r := newRun(t, def, OrderArgs{ID: "o-1"})
		out, session, err := replay.Start(context.Background(), def, &replay.ExecuteParams{History: r.history, Now: taskTime(1)})
		require.NoError(t, err)
		require.True(t, out.Completed)
		require.Nil(t, session)
		require.Zero(t, session.NextEventID())
		session.Close() // a nil session closes, as nothing
	})

	t.Run("UnreachableSessionIsClosedByTheGarbageCollector", func(t *testing.T) {
		t.Parallel()

		starts := 0
		unwound := make(chan struct{})
		def := sequentialDefinition(3, &starts, unwound)
		r := newRun(t, def, OrderArgs{ID: "o-1"})
		r.replayOnly = true
		func() {
			_, session, err := replay.Start(context.Background(), def, &replay.ExecuteParams{History: r.history, Now: taskTime(1)})
			require.NoError(t, err)
			require.NotNil(t, session)
		}() // dropped without Close
		deadline := time.After(10 * time.Second)
		for {
			runtime.GC()
			select {
			case <-unwound:
				return
			case <-deadline:
				t.Fatal("a dropped session's coroutines were never unwound")
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
}

// BenchmarkRun measures a whole run of n sequential activities, task by
// task, as the worker runs it: replaying the history at every task
// (Execute), or continuing the run's session (Start, then Continue).
func BenchmarkRun(b *testing.B) {
	for _, n := range []int{3, 10, 100} {
		starts := 0
		def := sequentialDefinition(n, &starts, nil)
		started, err := history.NewEvent(1, taskTime(0), &history.WorkflowStartedAttributes{
			Kind: def.Kind, Args: []byte(`{"id":"o-1"}`), WorkflowID: "wf-1", RunID: "run-1", Generation: 1,
		})
		require.NoError(b, err)
		for _, sticky := range []bool{false, true} {
			b.Run(fmt.Sprintf("SequentialActivities=%d/Sticky=%t", n, sticky), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					events := []history.Event{started}
					var (
						out     *replay.Outcome
						session *replay.CachedRun
						err     error
					)
					for task := 1; out == nil || !out.Completed; task++ {
						params := &replay.ExecuteParams{History: events, Now: taskTime(task)}
						if out != nil {
							params.Inputs = []history.Event{completed(b, out.Activities[0].EventID, 1)}
						}
						switch {
						case !sticky:
							out, err = replay.Execute(context.Background(), def, params)
						case session == nil:
							out, session, err = replay.Start(context.Background(), def, params)
						default:
							out, err = session.Continue(context.Background(), params)
						}
						require.NoError(b, err)
						events = append(events, out.Events...)
					}
					session.Close()
				}
			})
		}
	}
}
