package replay_test

import (
	"fmt"
	"time"

	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
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

// OrderWorkflow is a workflow type as users write it.
type OrderWorkflow struct {
	workflow.Defaults[OrderArgs, Receipt]
}

func (w *OrderWorkflow) Run(ctx workflow.Context, args OrderArgs) (Receipt, error) {
	return sequential(ctx, args)
}

func TestBindInfersTypesFromRun(t *testing.T) {
	t.Parallel()

	def := replay.Bind(&OrderWorkflow{})
	require.Equal(t, "order", def.Kind)

	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.task()
	r.task(completed(t, 3, 1))
	r.task(completed(t, 6, 2))
	out := r.task(completed(t, 9, 3))
	require.Equal(t, Receipt{Total: 6}, decodeResult[Receipt](t, out))
}

func TestExecuteParallelActivities(t *testing.T) {
	t.Parallel()

	parallel := func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
		futures := make([]workflow.Future[int], 10)
		for i := range futures {
			futures[i] = workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID, Step: i}, nil)
		}
		var receipt Receipt
		for i, f := range futures {
			v, err := f.Get(ctx)
			if err != nil {
				return Receipt{}, err
			}
			receipt.Total += v
			receipt.Notes = append(receipt.Notes, fmt.Sprint(i, "=", v))
		}
		return receipt, nil
	}

	// Each order is a sequence of batches: the scheduled activities (by
	// position 0–9) whose outcomes arrive together in one task.
	orders := map[string][][]int{
		"AllAtOnce":    {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
		"AllReversed":  {{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},
		"OneByOne":     {{3}, {0}, {9}, {1}, {8}, {2}, {7}, {4}, {6}, {5}},
		"Batches":      {{5, 2}, {9, 0, 1}, {4}, {3, 8, 7, 6}},
		"LastFirstRev": {{9}, {8, 7, 6, 5, 4, 3, 2, 1}, {0}},
	}
	for name, batches := range orders {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			r := newRun(t, define(parallel), OrderArgs{ID: "o-1"})
			out := r.task()
			require.Len(t, out.Activities, 10)
			ids := make([]int64, 10)
			for i, a := range out.Activities {
				ids[i] = a.EventID
				require.Equal(t, int64(3+i), a.EventID)
			}
			for _, batch := range batches {
				var inputs []history.Event
				for _, pos := range batch {
					inputs = append(inputs, completed(t, ids[pos], (pos+1)*100))
				}
				out = r.task(inputs...)
				require.Empty(t, out.Activities)
				require.Empty(t, out.Dropped)
			}
			receipt := decodeResult[Receipt](t, out)
			require.Equal(t, 5500, receipt.Total)
			require.Equal(t, "0=100", receipt.Notes[0])
			require.Equal(t, "9=1000", receipt.Notes[9])
			require.Empty(t, r.pendingActivities())
		})
	}
}

func TestExecuteActivityFailure(t *testing.T) {
	t.Parallel()

	var seen error
	def := define(func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
		_, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID}, nil).Get(ctx)
		seen = err
		return Receipt{}, fmt.Errorf("charging order %s: %w", args.ID, err)
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.task()
	out := r.task(failed(t, 3, history.Failure{
		Message: "card declined", Type: "CardDeclined", NonRetryable: true, Details: []byte(`{"code":51}`),
		Cause: &history.Failure{Message: "issuer said no", Type: "*errors.errorString"},
	}))

	var actErr *workflow.ActivityError
	require.ErrorAs(t, seen, &actErr)
	require.Equal(t, "charge", actErr.Kind)
	require.Equal(t, int64(3), actErr.ScheduledEventID)
	require.Equal(t, 3, actErr.Attempt)
	var appErr *workflow.ApplicationError
	require.ErrorAs(t, seen, &appErr)
	require.Equal(t, "CardDeclined", appErr.Type)
	require.True(t, appErr.NonRetryable)
	require.JSONEq(t, `{"code":51}`, string(appErr.Details))
	require.EqualError(t, appErr.Cause, "issuer said no")

	require.True(t, out.Completed)
	require.Nil(t, out.Result)
	require.NotNil(t, out.Failure)
	require.Equal(t, "*fmt.wrapError", out.Failure.Type)
	require.Equal(t, replay.FailureTypeActivity, out.Failure.Cause.Type)
	require.Equal(t, "CardDeclined", out.Failure.Cause.Cause.Type)
	require.Equal(t, "issuer said no", out.Failure.Cause.Cause.Cause.Message)
	require.Equal(t, history.EventWorkflowFailed, out.Events[len(out.Events)-1].Type)
}

func TestExecuteActivityTimedOutAndCanceled(t *testing.T) {
	t.Parallel()

	var errs []error
	def := define(func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
		a := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID}, nil)
		b := workflow.ExecuteActivity[int](ctx, ShipArgs{Order: args.ID}, nil)
		_, errA := a.Get(ctx)
		_, errB := b.Get(ctx)
		errs = []error{errA, errB}
		return Receipt{}, nil
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.task()
	timedOut, err := history.NewEvent(0, time.Time{}, &history.ActivityTimedOutAttributes{
		ScheduledEventID: 3, TimeoutType: history.TimeoutHeartbeat, LastFailure: &history.Failure{Message: "flaky"}, Attempt: 2,
	})
	require.NoError(t, err)
	canceled, err := history.NewEvent(0, time.Time{}, &history.ActivityCanceledAttributes{ScheduledEventID: 4, Attempt: 1})
	require.NoError(t, err)
	out := r.task(canceled, timedOut)
	require.True(t, out.Completed)

	require.ErrorIs(t, errs[0], workflow.ErrTimeout)
	var timeoutErr *workflow.TimeoutError
	require.ErrorAs(t, errs[0], &timeoutErr)
	require.Equal(t, history.TimeoutHeartbeat, timeoutErr.TimeoutType)
	require.EqualError(t, timeoutErr.LastFailure, "flaky")
	require.ErrorIs(t, errs[1], workflow.ErrCanceled)
	var actErr *workflow.ActivityError
	require.ErrorAs(t, errs[1], &actErr)
	require.Equal(t, "ship", actErr.Kind)
}

func TestExecuteDropsDuplicateAndUnknownOutcomes(t *testing.T) {
	t.Parallel()

	r := newRun(t, define(sequential), OrderArgs{ID: "o-1"})
	r.task()
	// The same outcome twice in one batch, and an outcome for no activity.
	out := r.task(completed(t, 3, 10), completed(t, 3, 99), completed(t, 42, 1))
	require.Len(t, out.Dropped, 2)
	require.Contains(t, out.Dropped[0].Reason, "already has its outcome")
	require.Contains(t, out.Dropped[1].Reason, "no activity was started by event 42")
	require.Equal(t, []history.EventType{history.EventActivityCompleted, history.EventWorkflowTaskStarted, history.EventActivityScheduled}, eventTypes(out.Events))

	// A late duplicate in a later task (a stale completion): dropped, never
	// delivered twice.
	out = r.task(completed(t, 3, 99))
	require.Len(t, out.Dropped, 1)
	require.Equal(t, []history.EventType{history.EventWorkflowTaskStarted}, eventTypes(out.Events))

	r.task(completed(t, 6, 20))
	out = r.task(completed(t, 10, 30)) // event 7 is the boundary of the task that dropped the duplicate
	require.Equal(t, Receipt{Total: 60}, decodeResult[Receipt](t, out))

	// Once closed, every input is dropped and nothing is appended.
	out = r.task(completed(t, 10, 30))
	require.True(t, out.Completed)
	require.Empty(t, out.Events)
	require.Len(t, out.Dropped, 1)
	require.Equal(t, Receipt{Total: 60}, decodeResult[Receipt](t, out))
}

func eventTypes(events []history.Event) []history.EventType {
	types := make([]history.EventType, len(events))
	for i, ev := range events {
		types[i] = ev.Type
	}
	return types
}

// registry is what the worker's AddWorkflow builds.
type registry struct{ workflows map[string]*replay.Definition }

func addWorkflow[A workflow.Args, R any](r *registry, wf workflow.Workflow[A, R]) {
	def := replay.Bind(wf)
	r.workflows[def.Kind] = def
}

func TestAddWorkflowInfersTypes(t *testing.T) {
	t.Parallel()

	reg := &registry{workflows: map[string]*replay.Definition{}}
	addWorkflow(reg, &OrderWorkflow{}) // A = OrderArgs, R = Receipt, from Run
	require.Contains(t, reg.workflows, "order")

	r := newRun(t, reg.workflows["order"], OrderArgs{ID: "o-1"})
	out := r.task()
	require.Len(t, out.Activities, 1)
}

// A Go error wrapping another records only its own words; the cause holds
// the rest, so the chain reads each text once.
func TestFailureOfAWrappingErrorSaysEachTextOnce(t *testing.T) {
	t.Parallel()

	def := define(func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
		_, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID}, nil).Get(ctx)
		return Receipt{}, fmt.Errorf("charging order %s: %w", args.ID, err)
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.task()
	out := r.task(failed(t, 3, history.Failure{Message: "card declined", Type: "CardDeclined"}))

	require.Equal(t, "*fmt.wrapError", out.Failure.Type, "the type still names the Go type, for retry policies")
	require.Equal(t, "charging order o-1", out.Failure.Message)
	require.Equal(t, "activity charge (event 3, attempt 3) failed", out.Failure.Cause.Message)
	require.Equal(t, "card declined", out.Failure.Cause.Cause.Message)
}
