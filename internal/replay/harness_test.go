package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

// taskTime is the time of the n-th task of a test run.
func taskTime(n int) time.Time {
	return time.Date(2026, 11, 30, 12, 0, n, 0, time.UTC)
}

// run is a fake worker: it keeps a run's history and executes tasks on it,
// appending what each task decides, as the real worker commits it.
type run struct {
	t       testing.TB
	def     *replay.Definition
	history []history.Event
	tasks   int
	params  replay.ExecuteParams // template for every task

	// The run's sticky session: every task is run on it too (or, when it
	// does not stand at the end of history, on a new one), and must decide
	// exactly what Execute decided from the whole history.
	session    *replay.CachedRun
	sessionDef *replay.Definition // the code the session runs
	// replayOnly turns the sticky check off, for a test whose workflow
	// records what its code does (running every task twice doubles it) or
	// changes the run's identity between tasks.
	replayOnly bool
}

func newRun(t testing.TB, def *replay.Definition, args any) *run {
	t.Helper()
	encoded, err := json.Marshal(args)
	require.NoError(t, err)
	started, err := history.NewEvent(1, taskTime(0), &history.WorkflowStartedAttributes{
		Kind: def.Kind, Args: encoded, WorkflowID: "wf-1", RunID: "run-1", Generation: 1,
	})
	require.NoError(t, err)
	return &run{t: t, def: def, history: []history.Event{started}}
}

// task executes a task with inputs and commits its events.
func (r *run) task(inputs ...history.Event) *replay.Outcome {
	r.t.Helper()
	out, err := r.try(inputs...)
	require.NoError(r.t, err)
	return out
}

// try executes a task with inputs, committing its events if it succeeds.
func (r *run) try(inputs ...history.Event) (*replay.Outcome, error) {
	r.t.Helper()
	r.tasks++
	params := r.params
	params.History = r.history
	params.Inputs = inputs
	params.Now = taskTime(r.tasks)
	params.Info.TaskAttempt = 1
	out, err := replay.Execute(context.Background(), r.def, &params)
	if !r.replayOnly {
		r.sticky(&params, out, err)
	}
	if err != nil {
		return nil, err
	}
	for i, ev := range out.Events {
		require.Equal(r.t, int64(len(r.history)+1), ev.ID, "event %d of the outcome", i)
		r.history = append(r.history, ev)
	}
	return out, nil
}

// sticky runs the task of params on the run's session, continuing it when
// it stands at the end of history, else starting one, and checks that it
// decides what Execute decided (out, err).
func (r *run) sticky(params *replay.ExecuteParams, out *replay.Outcome, err error) {
	r.t.Helper()
	var (
		got    *replay.Outcome
		gotErr error
	)
	if r.session.NextEventID() == int64(len(params.History))+1 && r.sessionDef == r.def {
		got, gotErr = r.session.Continue(context.Background(), params)
	} else {
		r.session.Close()
		got, r.session, gotErr = replay.Start(context.Background(), r.def, params)
		r.sessionDef = r.def
		r.t.Cleanup(r.session.Close)
	}
	if gotErr != nil || err != nil {
		require.Equal(r.t, fmt.Sprint(err), fmt.Sprint(gotErr), "Execute's error, and the session's")
		r.session.Close() // a failed task leaves the session ahead of history
		r.session = nil
		return
	}
	require.Equal(r.t, outcomeJSON(r.t, out), outcomeJSON(r.t, got), "the session decided otherwise than Execute")
	if got.Completed {
		require.Zero(r.t, r.session.NextEventID(), "a session that ended its run is closed")
		r.session = nil
		return
	}
	require.Equal(r.t, int64(len(params.History)+len(got.Events))+1, r.session.NextEventID())
}

// outcomeJSON is an outcome as JSON, to compare two.
func outcomeJSON(t testing.TB, out *replay.Outcome) string {
	t.Helper()
	raw, err := json.Marshal(out)
	require.NoError(t, err)
	return string(raw)
}

// scheduled returns the IDs and kinds of the ActivityScheduled events of history
// that have no outcome yet.
func (r *run) pendingActivities() map[int64]string {
	r.t.Helper()
	pending := map[int64]string{}
	for _, ev := range r.history {
		attrs, err := history.DecodeAttributes(ev)
		require.NoError(r.t, err)
		switch a := attrs.(type) {
		case *history.ActivityScheduledAttributes:
			pending[ev.ID] = a.Kind
		case *history.ActivityCompletedAttributes:
			delete(pending, a.ScheduledEventID)
		case *history.ActivityFailedAttributes:
			delete(pending, a.ScheduledEventID)
		case *history.ActivityTimedOutAttributes:
			delete(pending, a.ScheduledEventID)
		case *history.ActivityCanceledAttributes:
			delete(pending, a.ScheduledEventID)
		}
	}
	return pending
}

func (r *run) types() []history.EventType {
	types := make([]history.EventType, len(r.history))
	for i, ev := range r.history {
		types[i] = ev.Type
	}
	return types
}

func completed(t testing.TB, scheduledID int64, result any) history.Event {
	t.Helper()
	encoded, err := json.Marshal(result)
	require.NoError(t, err)
	ev, err := history.NewEvent(0, time.Time{}, &history.ActivityCompletedAttributes{ScheduledEventID: scheduledID, Result: encoded, Attempt: 1})
	require.NoError(t, err)
	return ev
}

func failed(t testing.TB, scheduledID int64, failure history.Failure) history.Event {
	t.Helper()
	ev, err := history.NewEvent(0, time.Time{}, &history.ActivityFailedAttributes{ScheduledEventID: scheduledID, Failure: failure, Attempt: 3})
	require.NoError(t, err)
	return ev
}

func decodeResult[T any](t testing.TB, out *replay.Outcome) T {
	t.Helper()
	require.True(t, out.Completed)
	require.Nil(t, out.Failure)
	var v T
	require.NoError(t, json.Unmarshal(out.Result, &v))
	return v
}

// Test workflow types.

type OrderArgs struct {
	ID string `json:"id"`
}

func (OrderArgs) Kind() string { return "order" }

type ChargeArgs struct {
	Order string `json:"order"`
	Step  int    `json:"step"`
}

func (ChargeArgs) Kind() string { return "charge" }

type ShipArgs struct {
	Order string `json:"order"`
}

func (ShipArgs) Kind() string { return "ship" }

type Receipt struct {
	Total int      `json:"total"`
	Notes []string `json:"notes,omitempty"`
}

// funcWorkflow adapts a function to workflow.Workflow for tests.
type funcWorkflow[A workflow.Args, R any] struct {
	workflow.Defaults[A, R]
	run func(ctx workflow.Context, args A) (R, error)
}

func (w *funcWorkflow[A, R]) Run(ctx workflow.Context, args A) (R, error) { return w.run(ctx, args) }

func define[A workflow.Args, R any](run func(ctx workflow.Context, args A) (R, error)) *replay.Definition {
	return replay.Bind(&funcWorkflow[A, R]{run: run})
}
