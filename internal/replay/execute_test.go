package replay_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/workflow"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func sequential(ctx workflow.Context, args OrderArgs) (Receipt, error) {
	var receipt Receipt
	for step := 1; step <= 3; step++ {
		total, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID, Step: step}, nil).Get(ctx)
		if err != nil {
			return Receipt{}, err
		}
		receipt.Total += total
	}
	return receipt, nil
}

func TestExecuteSequentialActivities(t *testing.T) {
	t.Parallel()

	r := newRun(t, define(sequential), OrderArgs{ID: "o-1"})
	out := r.task()
	require.False(t, out.Completed)
	require.Len(t, out.Activities, 1)
	require.Equal(t, int64(3), out.Activities[0].EventID)
	require.Equal(t, "charge", out.Activities[0].Attributes.Kind)
	require.JSONEq(t, `{"order":"o-1","step":1}`, string(out.Activities[0].Attributes.Args))

	out = r.task(completed(t, 3, 10))
	require.Len(t, out.Activities, 1)
	require.Equal(t, int64(6), out.Activities[0].EventID)

	out = r.task(completed(t, 6, 20))
	require.Len(t, out.Activities, 1)
	require.Equal(t, int64(9), out.Activities[0].EventID)

	out = r.task(completed(t, 9, 30))
	require.Equal(t, Receipt{Total: 60}, decodeResult[Receipt](t, out))
	require.Equal(t, []history.EventType{
		history.EventWorkflowStarted, history.EventWorkflowTaskStarted, history.EventActivityScheduled,
		history.EventActivityCompleted, history.EventWorkflowTaskStarted, history.EventActivityScheduled,
		history.EventActivityCompleted, history.EventWorkflowTaskStarted, history.EventActivityScheduled,
		history.EventActivityCompleted, history.EventWorkflowTaskStarted, history.EventWorkflowCompleted,
	}, r.types())
}
