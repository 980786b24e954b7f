package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

func timerFired(t testing.TB, startedID int64) history.Event {
	t.Helper()
	ev, err := history.NewEvent(0, time.Time{}, &history.TimerFiredAttributes{StartedEventID: startedID})
	require.NoError(t, err)
	return ev
}

func TestExecuteSleep(t *testing.T) {
	t.Parallel()

	type result struct {
		Before, After time.Time
	}
	def := define(func(ctx workflow.Context, args OrderArgs) (result, error) {
		before := workflow.Now(ctx)
		if err := workflow.Sleep(ctx, time.Hour); err != nil {
			return result{}, err
		}
		// Zero and negative durations don't touch history.
		if _, err := workflow.NewTimer(ctx, 0).Get(ctx); err != nil {
			return result{}, err
		}
		return result{Before: before, After: workflow.Now(ctx)}, nil
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	out := r.task()
	require.Equal(t, []history.EventType{history.EventWorkflowTaskStarted, history.EventTimerStarted}, eventTypes(out.Events))
	require.Len(t, out.Timers, 1)
	require.Equal(t, int64(3), out.Timers[0].EventID)
	require.Equal(t, history.Duration(time.Hour), out.Timers[0].Attributes.Duration)
	require.True(t, taskTime(1).Add(time.Hour).Equal(out.Timers[0].Attributes.FireAt))

	// A TimerFired naming an activity or an unknown event is dropped.
	out = r.task(timerFired(t, 2))
	require.Len(t, out.Dropped, 1)
	require.Contains(t, out.Dropped[0].Reason, "no timer was started by event 2")

	out = r.task(timerFired(t, 3), timerFired(t, 3))
	require.Len(t, out.Dropped, 1)
	require.Contains(t, out.Dropped[0].Reason, "already has its outcome")
	got := decodeResult[result](t, out)
	require.True(t, taskTime(1).Equal(got.Before))
	require.True(t, taskTime(3).Equal(got.After))
	require.NoError(t, replay.Replay(context.Background(), def, &replay.ExecuteParams{History: r.history}))
}

func TestExecuteTimerRace(t *testing.T) {
	t.Parallel()

	// An activity with a deadline: whichever of the activity and the timer
	// comes first wins; the loser is cancelled.
	def := define(func(ctx workflow.Context, args OrderArgs) (string, error) {
		timerCtx, cancelTimer := workflow.WithCancel(ctx)
		actCtx, cancelActivity := workflow.WithCancel(ctx)
		timer := workflow.NewTimer(timerCtx, 10*time.Minute)
		charge := workflow.ExecuteActivity[int](actCtx, ChargeArgs{Order: args.ID}, nil)
		winner := ""
		workflow.NewSelector(ctx).
			AddFuture(timer, func() { winner = "timer"; cancelActivity() }).
			AddFuture(charge, func() { winner = "charge"; cancelTimer() }).
			Select(ctx)
		if winner == "timer" {
			_, err := charge.Get(ctx)
			if err == nil {
				return "", nil
			}
		} else {
			_, err := timer.Get(ctx)
			if err == nil {
				return "", nil
			}
		}
		return winner, nil
	})

	t.Run("ActivityWins", func(t *testing.T) {
		t.Parallel()

		r := newRun(t, def, OrderArgs{ID: "o-1"})
		r.task()
		out := r.task(completed(t, 4, 1))
		require.Equal(t, "charge", decodeResult[string](t, out))
		require.Equal(t, []int64{3}, out.CanceledTimers)
		require.Contains(t, eventTypes(out.Events), history.EventTimerCanceled)
		require.NoError(t, replay.Replay(context.Background(), def, &replay.ExecuteParams{History: r.history}))
	})

	t.Run("TimerWins", func(t *testing.T) {
		t.Parallel()

		r := newRun(t, def, OrderArgs{ID: "o-1"})
		r.task()
		out := r.task(timerFired(t, 3))
		require.Equal(t, "timer", decodeResult[string](t, out))
		require.Equal(t, []int64{4}, out.CanceledActivities)
		require.NoError(t, replay.Replay(context.Background(), def, &replay.ExecuteParams{History: r.history}))
	})
}

func TestExecuteSleepCanceled(t *testing.T) {
	t.Parallel()

	def := define(func(ctx workflow.Context, args OrderArgs) (string, error) {
		err := workflow.Sleep(ctx, time.Hour)
		// A cancelled Context starts no timer.
		_, err2 := workflow.NewTimer(ctx, time.Hour).Get(ctx)
		if err2 == nil {
			return "", nil
		}
		return "", err
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.task()
	out := r.task(cancelRequested(t))
	require.True(t, out.Canceled)
	require.Equal(t, []int64{3}, out.CanceledTimers)
	require.Empty(t, out.Timers)
	out = r.task(timerFired(t, 3))
	require.True(t, out.Completed)
	require.Len(t, out.Dropped, 1)
}
