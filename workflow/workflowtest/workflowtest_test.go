package workflowtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/weirhq/weir/workflow"
	"github.com/weirhq/weir/workflow/workflowtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type OrderArgs struct {
	ID string `json:"id"`
}

func (OrderArgs) Kind() string { return "order" }

type ChargeArgs struct {
	Order string `json:"order"`
}

func (ChargeArgs) Kind() string { return "charge" }

type Charge struct {
	ID string `json:"id"`
}

type Approve struct {
	By string `json:"by"`
}

func (Approve) Kind() string { return "approve" }

// ApprovalWorkflow charges an order once approved, or gives up after a day.
type ApprovalWorkflow struct {
	workflow.Defaults[OrderArgs, string]
}

type StateQuery struct{}

func (StateQuery) Kind() string { return "state" }

func (*ApprovalWorkflow) Run(ctx workflow.Context, args OrderArgs) (string, error) {
	state := "waiting for approval"
	workflow.SetQueryHandler(ctx, func(StateQuery) (string, error) { return state, nil })
	approvals := workflow.GetSignalChannel[Approve](ctx)
	timeout := workflow.NewTimer(ctx, 24*time.Hour)
	approvedBy := ""
	workflow.NewSelector(ctx).
		AddReceive(approvals, func() {
			a, _, _ := approvals.TryReceive(ctx)
			approvedBy = a.By
		}).
		AddFuture(timeout, func() {}).
		Select(ctx)
	state = "approved"
	if approvedBy == "" {
		state = "timed out"
		return "", &workflow.ApplicationError{Message: "not approved in time", Type: "ApprovalTimeout"}
	}
	charge, err := workflow.ExecuteActivity[Charge](ctx, ChargeArgs{Order: args.ID}, nil).Get(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s approved by %s at %s", charge.ID, approvedBy, workflow.Now(ctx).Format(time.TimeOnly)), nil
}

func TestExecute(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) *workflowtest.Env {
		t.Helper()
		env := workflowtest.New(t, nil)
		workflowtest.OnActivity(env, func(ctx context.Context, args ChargeArgs) (Charge, error) {
			return Charge{ID: "ch-" + args.Order}, nil
		})
		return env
	}

	t.Run("ActivityError", func(t *testing.T) {
		t.Parallel()

		env := workflowtest.New(t, nil)
		workflowtest.OnActivity(env, func(ctx context.Context, args ChargeArgs) (Charge, error) {
			return Charge{}, &workflow.ApplicationError{Message: "declined", Type: "CardDeclined", NonRetryable: true}
		})
		env.SignalAfter(0, Approve{By: "ann"})
		_, err := workflowtest.Execute(env, &ApprovalWorkflow{}, OrderArgs{ID: "o-1"})
		var appErr *workflow.ApplicationError
		require.ErrorAs(t, err, &appErr)
		require.Equal(t, "ActivityError", appErr.Type)
		require.ErrorAs(t, appErr.Cause, &appErr)
		require.Equal(t, "CardDeclined", appErr.Type)
	})

	t.Run("ApprovedBySignal", func(t *testing.T) {
		t.Parallel()

		env := setup(t)
		env.SignalAfter(3*time.Hour, Approve{By: "ann"})
		got, err := workflowtest.Execute(env, &ApprovalWorkflow{}, OrderArgs{ID: "o-1"})
		require.NoError(t, err)
		require.Equal(t, "ch-o-1 approved by ann at 03:00:00", got)
		require.Equal(t, workflowtest.StartDefault.Add(3*time.Hour), env.Now())
		require.Equal(t, 3, env.Tasks())
	})

	t.Run("ContinueAsNew", func(t *testing.T) {
		t.Parallel()

		env := setup(t)
		got, err := workflowtest.Execute(env, &countdownWorkflow{}, OrderArgs{ID: "3"})
		require.NoError(t, err)
		require.Equal(t, "liftoff", got)
		require.Equal(t, workflowtest.StartDefault.Add(3*time.Hour), env.Now())
	})

	t.Run("Blocked", func(t *testing.T) {
		t.Parallel()

		env := setup(t)
		_, err := workflowtest.Execute(env, &waitForeverWorkflow{}, OrderArgs{ID: "o-1"})
		require.ErrorIs(t, err, workflowtest.ErrBlocked)
	})

	t.Run("Canceled", func(t *testing.T) {
		t.Parallel()

		env := setup(t)
		env.CancelAfter(time.Hour)
		_, err := workflowtest.Execute(env, &waitForeverWorkflow{}, OrderArgs{ID: "o-1"})
		require.ErrorIs(t, err, workflow.ErrCanceled)
	})

	t.Run("NonDeterminism", func(t *testing.T) {
		t.Parallel()

		env := setup(t)
		_, err := workflowtest.Execute(env, &flakyWorkflow{}, OrderArgs{ID: "o-1"})
		require.ErrorIs(t, err, workflow.ErrNonDeterminism)
	})

	t.Run("TimesOut", func(t *testing.T) {
		t.Parallel()

		env := setup(t)
		env.SignalAfter(25*time.Hour, Approve{By: "too late"})
		_, err := workflowtest.Execute(env, &ApprovalWorkflow{}, OrderArgs{ID: "o-1"})
		var appErr *workflow.ApplicationError
		require.ErrorAs(t, err, &appErr)
		require.Equal(t, "ApprovalTimeout", appErr.Type)
		require.Equal(t, workflowtest.StartDefault.Add(24*time.Hour), env.Now())
		state, err := workflowtest.Query[string](env, StateQuery{})
		require.NoError(t, err)
		require.Equal(t, "timed out", state)
	})

	t.Run("UnregisteredActivity", func(t *testing.T) {
		t.Parallel()

		env := workflowtest.New(t, nil)
		env.SignalAfter(0, Approve{By: "ann"})
		_, err := workflowtest.Execute(env, &ApprovalWorkflow{}, OrderArgs{ID: "o-1"})
		require.ErrorContains(t, err, `no function registered for activity "charge"`)
	})
}

// countdownWorkflow sleeps an hour per round, one round per run.
type countdownWorkflow struct {
	workflow.Defaults[OrderArgs, string]
}

func (*countdownWorkflow) Run(ctx workflow.Context, args OrderArgs) (string, error) {
	if args.ID == "0" {
		return "liftoff", nil
	}
	if err := workflow.Sleep(ctx, time.Hour); err != nil {
		return "", err
	}
	return "", workflow.ContinueAsNew(ctx, OrderArgs{ID: string(args.ID[0] - 1)})
}

type waitForeverWorkflow struct {
	workflow.Defaults[OrderArgs, string]
}

func (*waitForeverWorkflow) Run(ctx workflow.Context, args OrderArgs) (string, error) {
	return "", workflow.Await(ctx, func() bool { return false })
}

// flakyWorkflow decides from state outside the workflow: replay catches it.
type flakyWorkflow struct {
	workflow.Defaults[OrderArgs, string]
	calls int
}

func (w *flakyWorkflow) Run(ctx workflow.Context, args OrderArgs) (string, error) {
	w.calls++
	if w.calls > 1 { // a different decision on replay
		return "", workflow.Sleep(ctx, time.Hour)
	}
	_, err := workflow.ExecuteActivity[Charge](ctx, ChargeArgs{Order: args.ID}, nil).Get(ctx)
	return "", err
}
