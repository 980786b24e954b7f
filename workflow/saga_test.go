package workflow_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/weirtest"
	"github.com/weirhq/weir/workflow"
)

type StepArgs struct {
	Name string `json:"name"`
}

func (StepArgs) Kind() string { return "saga_step" }

type UndoArgs struct {
	Name string `json:"name"`
}

func (UndoArgs) Kind() string { return "saga_undo" }

type TripArgs struct {
	FailAt string `json:"fail_at"`
}

func (TripArgs) Kind() string { return "trip" }

type TripWorkflow struct {
	workflow.Defaults[TripArgs, string]
}

// Run books a flight, a hotel and a car; if a booking fails, the bookings
// made so far are undone in reverse order.
func (w *TripWorkflow) Run(ctx workflow.Context, args TripArgs) (string, error) {
	saga := workflow.NewSaga(ctx, nil)
	for _, step := range []string{"flight", "hotel", "car"} {
		if _, err := workflow.ExecuteActivity[string](ctx, StepArgs{Name: step}, nil).Get(ctx); err != nil {
			return "", errors.Join(err, saga.Compensate())
		}
		saga.AddCompensation(func(ctx workflow.Context) error {
			_, err := workflow.ExecuteActivity[string](ctx, UndoArgs{Name: step}, nil).Get(ctx)
			return err
		})
	}
	return "booked", nil
}

func TestSaga(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T, failAt string, slow string) *weirtest.Env {
		t.Helper()
		env := weirtest.NewEnv(t, nil)
		if slow != "" { // the more specific mock first: the first that matches answers
			weirtest.OnActivity(env, StepArgs{Name: slow}).After(time.Hour).Return(slow+" booked", nil)
		}
		weirtest.OnActivity(env, StepArgs{}).ReturnFunc(func(_ context.Context, args StepArgs) (any, error) {
			if args.Name == failAt {
				return nil, &workflow.ApplicationError{Message: args.Name + " sold out", NonRetryable: true, Type: "SoldOut"}
			}
			return args.Name + " booked", nil
		})
		weirtest.OnActivity(env, UndoArgs{}).ReturnFunc(func(_ context.Context, args UndoArgs) (any, error) {
			return args.Name + " undone", nil
		})
		return env
	}
	undone := func(env *weirtest.Env) []string {
		var names []string
		for _, a := range weirtest.ActivityCallsOf[UndoArgs](env) {
			names = append(names, a.Name)
		}
		return names
	}

	t.Run("AllStepsSucceed", func(t *testing.T) {
		t.Parallel()
		env := setup(t, "", "")
		result, err := weirtest.ExecuteWorkflow(env, &TripWorkflow{}, TripArgs{})
		require.NoError(t, err)
		require.Equal(t, "booked", result)
		require.Empty(t, undone(env))
	})

	t.Run("FailureCompensatesInReverse", func(t *testing.T) {
		t.Parallel()
		env := setup(t, "car", "")
		_, err := weirtest.ExecuteWorkflow(env, &TripWorkflow{}, TripArgs{})
		require.ErrorContains(t, err, "car sold out")
		require.Equal(t, []string{"hotel", "flight"}, undone(env))
	})

	t.Run("CancellationStillCompensates", func(t *testing.T) {
		t.Parallel()
		env := setup(t, "", "car") // the car takes an hour: cancel meanwhile
		env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)
		_, err := weirtest.ExecuteWorkflow(env, &TripWorkflow{}, TripArgs{})
		require.Error(t, err)
		require.Equal(t, []string{"hotel", "flight"}, undone(env), "compensations ran on a disconnected context")
	})
}
