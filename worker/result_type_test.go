package worker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

type WrongResultArgs struct{}

func (WrongResultArgs) Kind() string { return "wrong_result" }

// WrongResultWorkflow asks for the reserve activity's result (a string) as
// an int, then, once that failed, as a string.
type WrongResultWorkflow struct {
	workflow.Defaults[WrongResultArgs, string]
}

func (*WrongResultWorkflow) Run(ctx workflow.Context, _ WrongResultArgs) (string, error) {
	_, err := workflow.ExecuteActivity[int](ctx, ReserveArgs{SKU: "apple"}, nil).Get(ctx)
	var mismatch *workflow.ActivityResultTypeError
	if !errors.As(err, &mismatch) || !errors.Is(err, workflow.ErrActivityResultType) {
		return "", err
	}
	reserved, err := workflow.ExecuteActivity[string](ctx, ReserveArgs{SKU: "pear"}, nil).Get(ctx)
	return mismatch.Error() + "; then " + reserved, err
}

type WrongResultFailsArgs struct{}

func (WrongResultFailsArgs) Kind() string { return "wrong_result_fails" }

// WrongResultFailsWorkflow returns the mismatch.
type WrongResultFailsWorkflow struct {
	workflow.Defaults[WrongResultFailsArgs, int]
}

func (*WrongResultFailsWorkflow) Run(ctx workflow.Context, _ WrongResultFailsArgs) (int, error) {
	return workflow.ExecuteActivity[int](ctx, ReserveArgs{SKU: "apple"}, nil).Get(ctx)
}

// TestActivityResultType: ExecuteActivity[R] of an activity registered on
// the worker with another result type fails where it is called, naming both
// types; the activity is not scheduled and its code does not run.
func TestActivityResultType(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	reserve := &ReserveActivity{}
	w, err := worker.New(b.pool, &worker.Config{Schema: b.schema})
	require.NoError(t, err)
	worker.AddWorkflow(w, &WrongResultWorkflow{})
	worker.AddWorkflow(w, &WrongResultFailsWorkflow{})
	worker.AddActivity(w, reserve)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.WithoutCancel(ctx))) })

	run, err := b.client.Start(ctx, WrongResultArgs{}, nil)
	require.NoError(t, err)
	result, err := getWithin[string](ctx, t, run)
	require.NoError(t, err)
	require.Equal(t, `workflow: activity "reserve" returns string, but ExecuteActivity asks for int; then reserved pear`, result)
	require.Equal(t, int64(1), reserve.calls.Load(), "only the well-typed call ran")
	var scheduled int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.History+" WHERE run_id = $1 AND type = 'ActivityScheduled'",
		run.RunID).Scan(&scheduled))
	require.Equal(t, 1, scheduled)

	run, err = b.client.Start(ctx, WrongResultFailsArgs{}, nil)
	require.NoError(t, err)
	_, err = getWithin[int](ctx, t, run)
	var failed *client.WorkflowFailedError
	require.ErrorAs(t, err, &failed)
	require.Equal(t, "ActivityResultTypeMismatch", failed.Failure.Type)
	require.True(t, failed.Failure.NonRetryable)
	require.Equal(t, int64(1), reserve.calls.Load())

	// A Replayer set up from the worker decides as the worker did.
	replayer, err := worker.NewReplayer(&worker.ReplayerConfig{Pool: b.pool, Schema: b.schema})
	require.NoError(t, err)
	require.NoError(t, replayer.AddWorkflowsOf(w))
	_, err = replayer.ReplayRun(ctx, run.WorkflowID, run.RunID)
	require.NoError(t, err)
}
