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

type AddItem struct {
	SKU string `json:"sku"`
}

func (AddItem) Kind() string { return "add_item" }

type Checkout struct{}

func (Checkout) Kind() string { return "checkout" }

func updateInput(t testing.TB, id, kind, args string) history.Event {
	t.Helper()
	ev, err := history.NewEvent(0, time.Time{}, &history.UpdateAcceptedAttributes{Args: []byte(args), Kind: kind, UpdateID: id})
	require.NoError(t, err)
	return ev
}

// cart takes add_item updates (validated: a SKU is required), each of which
// runs an activity, until a checkout signal.
func cart(ctx workflow.Context, _ OrderArgs) (Receipt, error) {
	var items []string
	workflow.SetUpdateHandler(ctx, func(ctx workflow.Context, add AddItem) (int, error) {
		if _, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: add.SKU}, nil).Get(ctx); err != nil {
			return 0, err
		}
		items = append(items, add.SKU)
		return len(items), nil
	}, &workflow.UpdateHandlerOpts[AddItem]{Validator: func(add AddItem) error {
		if add.SKU == "" {
			return errors.New("sku is required")
		}
		return nil
	}})
	if _, err := workflow.GetSignalChannel[Checkout](ctx).Receive(ctx); err != nil {
		return Receipt{}, err
	}
	return Receipt{Notes: items}, nil
}

func completions(out *replay.Outcome) map[string]*history.UpdateCompletedAttributes {
	done := map[string]*history.UpdateCompletedAttributes{}
	for _, ev := range out.Events {
		if ev.Type == history.EventUpdateCompleted {
			attrs, _ := history.DecodeAttributes(ev)
			a := attrs.(*history.UpdateCompletedAttributes)
			done[a.UpdateID] = a
		}
	}
	return done
}

func TestUpdates(t *testing.T) {
	t.Parallel()

	t.Run("AcceptedRunsHandlerAndRecordsResult", func(t *testing.T) {
		t.Parallel()
		r := newRun(t, define(cart), OrderArgs{ID: "c"})
		r.task()

		out := r.task(updateInput(t, "u1", "add_item", `{"sku":"A"}`))
		require.Empty(t, out.RejectedUpdates)
		require.Equal(t, history.EventUpdateAccepted, out.Events[0].Type, "the accepted update is an input of the task")
		require.Len(t, out.Activities, 1, "the handler runs at once")
		require.Empty(t, completions(out))

		out = r.task(completed(t, out.Activities[0].EventID, 1))
		done := completions(out)
		require.Len(t, done, 1)
		require.JSONEq(t, `1`, string(done["u1"].Result))

		// The whole history replays: the handler's commands are matched.
		require.NoError(t, replay.Replay(context.Background(), r.def, &replay.ExecuteParams{History: r.history, Now: taskTime(99)}))
	})

	t.Run("RejectedLeavesNoTrace", func(t *testing.T) {
		t.Parallel()
		r := newRun(t, define(cart), OrderArgs{ID: "c"})
		r.task()
		before := len(r.history)

		out := r.task(updateInput(t, "u2", "add_item", `{"sku":""}`), updateInput(t, "u3", "nope", `{}`))
		require.Len(t, out.RejectedUpdates, 2)
		require.Equal(t, "u2", out.RejectedUpdates[0].UpdateID)
		require.Contains(t, out.RejectedUpdates[0].Failure.Message, "sku is required")
		require.Equal(t, "UnknownUpdate", out.RejectedUpdates[1].Failure.Type)
		for _, ev := range r.history[before:] {
			require.NotEqual(t, history.EventUpdateAccepted, ev.Type)
		}
	})

	t.Run("BeforeTheCodeRanIsDeferred", func(t *testing.T) {
		t.Parallel()
		r := newRun(t, define(cart), OrderArgs{ID: "c"})
		out := r.task(updateInput(t, "u4", "add_item", `{"sku":"B"}`))
		require.Len(t, out.DeferredInputs, 1, "no handler could exist yet")
		require.Empty(t, out.RejectedUpdates)

		out = r.task(out.DeferredInputs...)
		require.Empty(t, out.DeferredInputs)
		require.Len(t, out.Activities, 1)
	})

	t.Run("DuplicateIDIsDropped", func(t *testing.T) {
		t.Parallel()
		r := newRun(t, define(cart), OrderArgs{ID: "c"})
		r.task()
		out := r.task(updateInput(t, "u5", "add_item", `{"sku":"C"}`))
		require.Len(t, out.Activities, 1)
		out = r.task(updateInput(t, "u5", "add_item", `{"sku":"C"}`))
		require.Empty(t, out.Activities, "the same update again does nothing")
		require.Len(t, out.Dropped, 1)
	})
}
