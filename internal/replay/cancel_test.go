package replay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

func cancelRequested(t testing.TB) history.Event {
	t.Helper()
	ev, err := history.NewEvent(0, time.Time{}, &history.CancelRequestedAttributes{Reason: "test"})
	require.NoError(t, err)
	return ev
}

func TestExecuteWorkflowCancellation(t *testing.T) {
	t.Parallel()

	var chargeErr error
	def := define(func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
		_, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID}, nil).Get(ctx)
		chargeErr = err
		if errors.Is(err, workflow.ErrCanceled) {
			// Clean up on a context that isn't cancelled.
			cleanup := workflow.NewDisconnectedContext(ctx)
			if _, err := workflow.ExecuteActivity[int](cleanup, ShipArgs{Order: "undo-" + args.ID}, nil).Get(cleanup); err != nil {
				return Receipt{}, err
			}
			// The cancelled root context schedules nothing more.
			_, err := workflow.ExecuteActivity[int](ctx, ShipArgs{Order: "never"}, nil).Get(ctx)
			return Receipt{}, err
		}
		return Receipt{}, err
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.task()

	out := r.task(cancelRequested(t), cancelRequested(t))
	require.Len(t, out.Dropped, 1, "a second cancel request changes nothing")
	require.Equal(t, []history.EventType{
		history.EventCancelRequested, history.EventWorkflowTaskStarted,
		history.EventActivityCancelRequested, history.EventActivityScheduled,
	}, eventTypes(out.Events))
	require.Equal(t, []int64{3}, out.CanceledActivities)
	require.Len(t, out.Activities, 1)
	require.JSONEq(t, `{"order":"undo-o-1"}`, string(out.Activities[0].Attributes.Args))
	require.ErrorIs(t, chargeErr, workflow.ErrCanceled)
	var actErr *workflow.ActivityError
	require.ErrorAs(t, chargeErr, &actErr)
	require.Equal(t, int64(3), actErr.ScheduledEventID)

	// The cancelled charge's own outcome arrives late: dropped.
	canceled, err := history.NewEvent(0, time.Time{}, &history.ActivityCanceledAttributes{ScheduledEventID: 3, Attempt: 1})
	require.NoError(t, err)
	out = r.task(canceled, completed(t, 7, 1))
	require.Len(t, out.Dropped, 1)
	require.True(t, out.Completed)
	require.True(t, out.Canceled)
	require.Equal(t, replay.FailureTypeCanceled, failureTypes(out.Failure)[len(failureTypes(out.Failure))-1])
	require.Equal(t, history.EventWorkflowCanceled, out.Events[len(out.Events)-1].Type)
	require.Empty(t, out.Activities)

	require.NoError(t, replay.Replay(context.Background(), def, &replay.ExecuteParams{History: r.history}))
	out, err = replay.Execute(context.Background(), def, &replay.ExecuteParams{History: r.history, Inputs: []history.Event{cancelRequested(t)}, Now: taskTime(9)})
	require.NoError(t, err)
	require.True(t, out.Canceled)
	require.Len(t, out.Dropped, 1)
}

func failureTypes(f *history.Failure) []string {
	var types []string
	for ; f != nil; f = f.Cause {
		types = append(types, f.Type)
	}
	return types
}

func TestExecuteWithCancel(t *testing.T) {
	t.Parallel()

	var errs []error
	def := define(func(ctx workflow.Context, args OrderArgs) (string, error) {
		slowCtx, cancel := workflow.WithCancel(ctx)
		slow := workflow.ExecuteActivity[int](slowCtx, ChargeArgs{Order: "slow"}, nil)
		fast := workflow.ExecuteActivity[int](ctx, ShipArgs{Order: "fast"}, nil)
		winner := ""
		workflow.NewSelector(ctx).
			AddFuture(slow, func() { winner = "slow" }).
			AddFuture(fast, func() { winner = "fast"; cancel(); cancel() }).
			Select(ctx)
		_, err := slow.Get(ctx)
		errs = append(errs, err)
		// A cancelled context schedules nothing; Await returns at once.
		_, err = workflow.ExecuteActivity[int](slowCtx, ChargeArgs{Order: "late"}, nil).Get(ctx)
		errs = append(errs, err, workflow.Await(slowCtx, func() bool { return false }))
		return winner, nil
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.replayOnly = true // its code records what it does
	r.task()
	out := r.task(completed(t, 4, 1))
	require.Equal(t, "fast", decodeResult[string](t, out))
	require.Equal(t, []int64{3}, out.CanceledActivities)
	require.Equal(t, []history.EventType{
		history.EventActivityCompleted, history.EventWorkflowTaskStarted,
		history.EventActivityCancelRequested, history.EventWorkflowCompleted,
	}, eventTypes(out.Events))
	require.Len(t, errs, 3)
	for _, err := range errs {
		require.ErrorIs(t, err, workflow.ErrCanceled)
	}
	require.NoError(t, replay.Replay(context.Background(), def, &replay.ExecuteParams{History: r.history}))
}

func TestExecuteAwaitReturnsOnCancellation(t *testing.T) {
	t.Parallel()

	doneReady := false
	def := define(func(ctx workflow.Context, args OrderArgs) (string, error) {
		err := workflow.Await(ctx, func() bool { return false })
		doneReady = ctx.Done().IsReady()
		return "awaited", err
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	out := r.task()
	require.False(t, out.Completed)
	out = r.task(cancelRequested(t))
	require.True(t, out.Canceled)
	require.True(t, doneReady)
}
