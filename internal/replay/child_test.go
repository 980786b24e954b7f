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

func childOutcome(t testing.TB, attrs history.Attributes) history.Event {
	t.Helper()
	ev, err := history.NewEvent(0, time.Time{}, attrs)
	require.NoError(t, err)
	return ev
}

// parent starts two children (one with the default, deterministic ID) and
// sums their results.
func parent(ctx workflow.Context, _ OrderArgs) (Receipt, error) {
	a := workflow.ExecuteChildWorkflow[int](ctx, OrderArgs{ID: "a"}, nil)
	b := workflow.ExecuteChildWorkflow[int](ctx, OrderArgs{ID: "b"}, &workflow.ChildWorkflowOpts{WorkflowID: "child-b", ParentClosePolicy: workflow.ParentCloseAbandon})
	var receipt Receipt
	for _, f := range []workflow.Future[int]{a, b} {
		n, err := f.Get(ctx)
		var childErr *workflow.ChildWorkflowError
		if errors.As(err, &childErr) {
			receipt.Notes = append(receipt.Notes, childErr.WorkflowID+" "+childErr.State)
			continue
		}
		if err != nil {
			return Receipt{}, err
		}
		receipt.Total += n
	}
	return receipt, nil
}

func TestChildWorkflows(t *testing.T) {
	t.Parallel()

	r := newRun(t, define(parent), OrderArgs{ID: "p"})
	out := r.task()
	require.Len(t, out.Children, 2)
	require.Equal(t, "wf-1/child-3", out.Children[0].Attributes.WorkflowID, "the default ID is the parent's plus the event ID")
	require.Equal(t, int64(3), out.Children[0].EventID)
	require.Equal(t, "terminate", out.Children[0].Attributes.ParentClosePolicy)
	require.Equal(t, "child-b", out.Children[1].Attributes.WorkflowID)
	require.Equal(t, "abandon", out.Children[1].Attributes.ParentClosePolicy)

	out = r.task(
		childOutcome(t, &history.ChildWorkflowFailedAttributes{ScheduledEventID: out.Children[1].EventID, State: "terminated", Failure: history.Failure{Message: "stop"}}),
		childOutcome(t, &history.ChildWorkflowCompletedAttributes{ScheduledEventID: out.Children[0].EventID, Result: []byte(`7`)}),
	)
	require.True(t, out.Completed)
	require.JSONEq(t, `{"total":7,"notes":["child-b terminated"]}`, string(out.Result))

	// The whole history replays.
	require.NoError(t, replay.Replay(context.Background(), r.def, &replay.ExecuteParams{History: r.history, Now: taskTime(9)}))
}
