package replay_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

func TestExecuteGetVersion(t *testing.T) {
	t.Parallel()

	// v0 charges once; v1 (change "split") charges in two steps; v2 adds a
	// shipment after the charge (change "ship").
	v0 := func(ctx workflow.Context, args OrderArgs) ([]int, error) {
		_, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID}, nil).Get(ctx)
		return nil, err
	}
	v1 := func(ctx workflow.Context, args OrderArgs) ([]int, error) {
		split := workflow.GetVersion(ctx, "split", workflow.DefaultVersion, 1)
		steps := 1
		if split == 1 {
			steps = 2
		}
		for step := range steps {
			if _, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID, Step: step}, nil).Get(ctx); err != nil {
				return nil, err
			}
		}
		return []int{split}, nil
	}
	v2 := func(ctx workflow.Context, args OrderArgs) ([]int, error) {
		versions, err := v1(ctx, args)
		if err != nil {
			return nil, err
		}
		ship := workflow.GetVersion(ctx, "ship", workflow.DefaultVersion, 1)
		if ship == 1 {
			if _, err := workflow.ExecuteActivity[int](ctx, ShipArgs{Order: args.ID}, nil).Get(ctx); err != nil {
				return nil, err
			}
		}
		return append(versions, ship), nil
	}
	// v3 dropped the old branch of "split": it requires version 1.
	v3 := func(ctx workflow.Context, args OrderArgs) ([]int, error) {
		workflow.GetVersion(ctx, "split", 1, 1)
		return nil, nil
	}
	// v4 removed the GetVersion calls once no run needed the old branches.
	v4 := func(ctx workflow.Context, args OrderArgs) ([]int, error) {
		for step := range 2 {
			if _, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID, Step: step}, nil).Get(ctx); err != nil {
				return nil, err
			}
		}
		_, err := workflow.ExecuteActivity[int](ctx, ShipArgs{Order: args.ID}, nil).Get(ctx)
		return []int{1, 1}, err
	}

	t.Run("NewRunRecordsMaxSupported", func(t *testing.T) {
		t.Parallel()

		r := newRun(t, define(v2), OrderArgs{ID: "o-1"})
		out := r.task()
		require.Equal(t, []history.EventType{history.EventWorkflowTaskStarted, history.EventMarkerRecorded, history.EventActivityScheduled}, eventTypes(out.Events))
		marker, err := history.Decode[*history.MarkerRecordedAttributes](out.Events[1])
		require.NoError(t, err)
		require.Equal(t, history.MarkerVersion, marker.Name)
		require.JSONEq(t, `{"change_id":"split","version":1}`, string(marker.Data))
		r.task(completed(t, 4, 1))
		r.task(completed(t, 7, 1))
		out = r.task(completed(t, 11, 1))
		require.Equal(t, []int{1, 1}, decodeResult[[]int](t, out))

		// v4 replays the same history, skipping the markers.
		require.NoError(t, replay.Replay(context.Background(), define(v4), &replay.ExecuteParams{History: r.history}))
	})

	t.Run("OldRunKeepsOldBranch", func(t *testing.T) {
		t.Parallel()

		// A run started under v0, continued under v2.
		r := newRun(t, define(v0), OrderArgs{ID: "o-1"})
		r.task()
		r.def = define(v2)
		out := r.task(completed(t, 3, 1))
		// "split" is DefaultVersion (one charge); "ship" is new here: recorded.
		require.Equal(t, []history.EventType{
			history.EventActivityCompleted, history.EventWorkflowTaskStarted,
			history.EventMarkerRecorded, history.EventActivityScheduled,
		}, eventTypes(out.Events))
		out = r.task(completed(t, 7, 1))
		require.Equal(t, []int{workflow.DefaultVersion, 1}, decodeResult[[]int](t, out))
		require.NoError(t, replay.Replay(context.Background(), define(v2), &replay.ExecuteParams{History: r.history}))

		// v3 no longer supports the old branch: a clear task failure.
		err := replay.Replay(context.Background(), define(v3), &replay.ExecuteParams{History: r.history})
		var ndErr *workflow.NonDeterminismError
		require.ErrorAs(t, err, &ndErr)
		require.Contains(t, ndErr.Expected, `version -1 of change "split"`)
		require.Contains(t, ndErr.Got, "1 to 1")
	})

	t.Run("RecordedVersionWins", func(t *testing.T) {
		t.Parallel()

		r := newRun(t, define(v1), OrderArgs{ID: "o-1"})
		r.task()
		// v1 recorded split=1; code now supporting up to 2 still gets 1.
		r.def = define(func(ctx workflow.Context, args OrderArgs) ([]int, error) {
			if v := workflow.GetVersion(ctx, "split", workflow.DefaultVersion, 2); v != 1 {
				return nil, fmt.Errorf("got version %d", v)
			}
			return v1(ctx, args) // a second call records nothing

		})
		out := r.task(completed(t, 4, 1))
		require.Equal(t, []history.EventType{history.EventActivityCompleted, history.EventWorkflowTaskStarted, history.EventActivityScheduled}, eventTypes(out.Events))
	})
}
