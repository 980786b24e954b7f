package weirtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/weirtest"
	"github.com/weirhq/weir/workflow"
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

type StateQuery struct{}

func (StateQuery) Kind() string { return "state" }

// ApprovalWorkflow charges an order once approved, or gives up after a day.
type ApprovalWorkflow struct {
	workflow.Defaults[OrderArgs, string]
}

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
	if approvedBy == "" {
		state = "timed out"
		return "", &workflow.ApplicationError{Message: "not approved in time", Type: "ApprovalTimeout"}
	}
	state = "charging"
	charge, err := workflow.ExecuteActivity[Charge](ctx, ChargeArgs{Order: args.ID}, nil).Get(ctx)
	if err != nil {
		return "", err
	}
	state = "charged"
	return fmt.Sprintf("%s approved by %s at %s", charge.ID, approvedBy, workflow.Now(ctx).Format(time.TimeOnly)), nil
}

// ChargeWorkflow charges an order with a retry policy of its own.
type ChargeWorkflow struct {
	workflow.Defaults[OrderArgs, string]
	Activity *workflow.ActivityOpts
}

func (w *ChargeWorkflow) Run(ctx workflow.Context, args OrderArgs) (string, error) {
	charge, err := workflow.ExecuteActivity[Charge](ctx, ChargeArgs{Order: args.ID}, w.Activity).Get(ctx)
	return charge.ID, err
}

// retry3x is a policy of 10s, 30s, 90s… between attempts.
func retry3x(maxAttempts int) *workflow.ActivityOpts {
	return &workflow.ActivityOpts{RetryPolicy: &workflow.RetryPolicy{
		BackoffCoefficient: 3, InitialInterval: 10 * time.Second, MaximumAttempts: maxAttempts, MaximumInterval: time.Hour,
	}}
}

// SleepWorkflow sleeps for args.ID's duration and returns when it woke.
type SleepWorkflow struct {
	workflow.Defaults[OrderArgs, time.Time]
}

func (*SleepWorkflow) Run(ctx workflow.Context, args OrderArgs) (time.Time, error) {
	d, err := time.ParseDuration(args.ID)
	if err != nil {
		return time.Time{}, err
	}
	if err := workflow.Sleep(ctx, d); err != nil {
		return time.Time{}, err
	}
	return workflow.Now(ctx), nil
}

// ChargeActivity is a real activity: it reports its attempt.
type ChargeActivity struct {
	activity.Defaults[ChargeArgs, Charge]
}

func (*ChargeActivity) Execute(ctx context.Context, args ChargeArgs) (Charge, error) {
	info, ok := activity.GetInfo(ctx)
	if !ok {
		return Charge{}, errors.New("no activity info")
	}
	if err := activity.CompleteTx(ctx, nil, Charge{}); !errors.Is(err, weirtest.ErrNoDatabase) {
		return Charge{}, fmt.Errorf("CompleteTx: %w", err)
	}
	return Charge{ID: fmt.Sprintf("real-%s-%s-attempt-%d", args.Order, info.WorkflowID, info.Attempt)}, nil
}

// countdownWorkflow sleeps an hour per round, one round per run.
type countdownWorkflow struct {
	workflow.Defaults[OrderArgs, string]
}

func (*countdownWorkflow) Run(ctx workflow.Context, args OrderArgs) (string, error) {
	if args.ID == "0" {
		return fmt.Sprintf("liftoff in generation %d", workflow.GetInfo(ctx).Generation), nil
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

// raceWorkflow races an activity against a timer.
type raceWorkflow struct {
	workflow.Defaults[OrderArgs, string]
}

func (*raceWorkflow) Run(ctx workflow.Context, args OrderArgs) (string, error) {
	actCtx, cancel := workflow.WithCancel(ctx)
	charge := workflow.ExecuteActivity[Charge](actCtx, ChargeArgs{Order: args.ID}, nil)
	timer := workflow.NewTimer(ctx, time.Hour)
	winner := ""
	workflow.NewSelector(ctx).
		AddFuture(charge, func() { winner = "charge" }).
		AddFuture(timer, func() { winner = "timer"; cancel() }).
		Select(ctx)
	return winner, nil
}

type panicWorkflow struct {
	workflow.Defaults[OrderArgs, string]
}

func (*panicWorkflow) Run(workflow.Context, OrderArgs) (string, error) { panic("workflow bug") }

// recordingTB records Errorf calls instead of failing the test.
type recordingTB struct {
	testing.TB
	errors []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func requireWorkflowFailure(t *testing.T, err error, state string) *client.Failure {
	t.Helper()
	var failed *client.WorkflowFailedError
	require.ErrorAs(t, err, &failed)
	require.Equal(t, state, failed.State)
	require.NotNil(t, failed.Failure)
	return failed.Failure
}

func TestExecuteWorkflow(t *testing.T) {
	t.Parallel()

	t.Run("ActivityRacesTimer", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, nil)
		weirtest.OnActivity(env, ChargeArgs{}).Return(Charge{ID: "ch"}, nil).After(2 * time.Hour)
		winner, err := weirtest.ExecuteWorkflow(env, &raceWorkflow{}, OrderArgs{ID: "o-1"})
		require.NoError(t, err)
		require.Equal(t, "timer", winner)
		require.Equal(t, time.Hour, env.Elapsed())
	})

	t.Run("ApprovedBySignal", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, nil)
		weirtest.OnActivity(env, ChargeArgs{}).ReturnFunc(func(ctx context.Context, args ChargeArgs) (any, error) {
			return Charge{ID: "ch-" + args.Order}, nil
		})
		var states []string
		query := func() {
			state, err := weirtest.QueryWorkflow[string](env, StateQuery{})
			require.NoError(t, err)
			states = append(states, env.Now().Format(time.TimeOnly)+" "+state)
		}
		env.RegisterDelayedCallback(query, time.Hour)
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(Approve{By: "ann"}) }, 3*time.Hour)
		got, err := weirtest.ExecuteWorkflow(env, &ApprovalWorkflow{}, OrderArgs{ID: "o-1"})
		require.NoError(t, err)
		require.Equal(t, "ch-o-1 approved by ann at 03:00:00", got)
		require.Equal(t, 3*time.Hour, env.Elapsed())
		require.Equal(t, weirtest.StartDefault.Add(3*time.Hour), env.Now())
		query()
		require.Equal(t, []string{"01:00:00 waiting for approval", "03:00:00 charged"}, states)
		require.Equal(t, []ChargeArgs{{Order: "o-1"}}, weirtest.ActivityCallsOf[ChargeArgs](env))
		require.True(t, env.AssertExpectations())
	})

	t.Run("AssertExpectations", func(t *testing.T) {
		t.Parallel()
		tb := &recordingTB{TB: t}
		env := weirtest.NewEnv(tb, nil)
		weirtest.OnActivity(env, ChargeArgs{}).Return(Charge{}, errors.New("down")).Times(2)
		weirtest.OnActivity(env, ChargeArgs{Order: "other"}).Return(Charge{}, nil)
		weirtest.OnActivity(env, ChargeArgs{}).Return(Charge{ID: "ch"}, nil)
		_, err := weirtest.ExecuteWorkflow(env, &ChargeWorkflow{Activity: retry3x(2)}, OrderArgs{ID: "o-1"})
		requireWorkflowFailure(t, err, "failed")
		require.False(t, env.AssertExpectations())
		require.Equal(t, []string{
			"weirtest: mock of activity charge was never called",
			"weirtest: mock of activity charge was never called",
		}, tb.errors)
	})

	t.Run("Blocked", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, nil)
		_, err := weirtest.ExecuteWorkflow(env, &waitForeverWorkflow{}, OrderArgs{ID: "o-1"})
		require.ErrorIs(t, err, weirtest.ErrBlocked)
	})

	t.Run("CallbacksRunInOrder", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, nil)
		var ran []string
		callback := func(name string) func() {
			return func() { ran = append(ran, env.Now().Format(time.TimeOnly)+" "+name) }
		}
		env.RegisterDelayedCallback(callback("c"), 2*time.Hour)
		env.RegisterDelayedCallback(callback("a"), time.Hour)
		env.RegisterDelayedCallback(callback("d"), 2*time.Hour)
		env.RegisterDelayedCallback(func() {
			callback("b")()
			env.RegisterDelayedCallback(callback("e"), time.Hour) // at 02:00, after c and d
		}, time.Hour)
		_, err := weirtest.ExecuteWorkflow(env, &SleepWorkflow{}, OrderArgs{ID: "3h"})
		require.NoError(t, err)
		require.Equal(t, []string{"01:00:00 a", "01:00:00 b", "02:00:00 c", "02:00:00 d", "02:00:00 e"}, ran)
	})

	t.Run("Canceled", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, nil)
		env.RegisterDelayedCallback(env.CancelWorkflow, time.Hour)
		_, err := weirtest.ExecuteWorkflow(env, &waitForeverWorkflow{}, OrderArgs{ID: "o-1"})
		requireWorkflowFailure(t, err, "cancelled")
		require.Equal(t, time.Hour, env.Elapsed())
	})

	t.Run("ContinueAsNew", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, nil)
		got, err := weirtest.ExecuteWorkflow(env, &countdownWorkflow{}, OrderArgs{ID: "3"})
		require.NoError(t, err)
		require.Equal(t, "liftoff in generation 4", got)
		require.Equal(t, 3*time.Hour, env.Elapsed())
	})

	t.Run("MaxTasksBoundsContinueAsNew", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, &weirtest.EnvConfig{MaxTasks: 10})
		_, err := weirtest.ExecuteWorkflow(env, &countdownWorkflow{}, OrderArgs{ID: "~"}) // '~' counts down through '!'…
		require.ErrorContains(t, err, "more than 10 workflow tasks")
	})

	t.Run("MockMatchesArgs", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, nil)
		special := weirtest.OnActivity(env, ChargeArgs{Order: "vip"}).Return(Charge{ID: "vip-charge"}, nil)
		weirtest.OnActivity(env, ChargeArgs{}).Return(Charge{ID: "plain-charge"}, nil)
		got, err := weirtest.ExecuteWorkflow(env, &ChargeWorkflow{}, OrderArgs{ID: "vip"})
		require.NoError(t, err)
		require.Equal(t, "vip-charge", got)
		require.Equal(t, 1, special.Calls())

		env = weirtest.NewEnv(t, nil)
		special = weirtest.OnActivity(env, ChargeArgs{Order: "vip"}).Return(Charge{ID: "vip-charge"}, nil)
		weirtest.OnActivity(env, ChargeArgs{}).Return(Charge{ID: "plain-charge"}, nil)
		got, err = weirtest.ExecuteWorkflow(env, &ChargeWorkflow{}, OrderArgs{ID: "o-1"})
		require.NoError(t, err)
		require.Equal(t, "plain-charge", got)
		require.Zero(t, special.Calls())
	})

	t.Run("NonDeterminism", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, nil)
		weirtest.OnActivity(env, ChargeArgs{}).Return(Charge{}, nil)
		_, err := weirtest.ExecuteWorkflow(env, &flakyWorkflow{}, OrderArgs{ID: "o-1"})
		require.ErrorIs(t, err, workflow.ErrNonDeterminism)
	})

	t.Run("NonRetryableErrorType", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, nil)
		opts := retry3x(10)
		opts.RetryPolicy.NonRetryableErrorTypes = []string{"CardDeclined"}
		weirtest.OnActivity(env, ChargeArgs{}).Return(nil, &workflow.ApplicationError{Message: "declined", Type: "CardDeclined"})
		_, err := weirtest.ExecuteWorkflow(env, &ChargeWorkflow{Activity: opts}, OrderArgs{ID: "o-1"})
		failure := requireWorkflowFailure(t, err, "failed")
		require.Equal(t, "ActivityError", failure.Type)
		require.Equal(t, "CardDeclined", failure.Cause.Type)
		require.Len(t, env.ActivityCalls(), 1)
		require.Zero(t, env.Elapsed())
	})

	t.Run("Panic", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, nil)
		weirtest.OnActivity(env, ChargeArgs{}).ReturnFunc(func(context.Context, ChargeArgs) (any, error) { panic("activity bug") })
		_, err := weirtest.ExecuteWorkflow(env, &ChargeWorkflow{Activity: retry3x(2)}, OrderArgs{ID: "o-1"})
		failure := requireWorkflowFailure(t, err, "failed")
		require.Equal(t, "PanicError", failure.Cause.Type, "an activity's panic fails the attempt")
		require.Len(t, env.ActivityCalls(), 2)

		env = weirtest.NewEnv(t, nil)
		_, err = weirtest.ExecuteWorkflow(env, &panicWorkflow{}, OrderArgs{ID: "o-1"})
		require.ErrorIs(t, err, workflow.ErrPanic, "a workflow's panic fails the task, returned as is")
	})

	t.Run("RealActivity", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, &weirtest.EnvConfig{WorkflowID: "wf-7"})
		weirtest.RegisterActivity(env, &ChargeActivity{})
		got, err := weirtest.ExecuteWorkflow(env, &ChargeWorkflow{}, OrderArgs{ID: "o-1"})
		require.NoError(t, err)
		require.Equal(t, "real-o-1-wf-7-attempt-1", got)
		calls := env.ActivityCalls()
		require.Len(t, calls, 1)
		require.False(t, calls[0].Mocked)
	})

	t.Run("RetriesDefaultToMaximumAttempts", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, nil)
		weirtest.OnActivity(env, ChargeArgs{}).Return(nil, errors.New("bank down"))
		_, err := weirtest.ExecuteWorkflow(env, &ChargeWorkflow{Activity: retry3x(0)}, OrderArgs{ID: "o-1"})
		requireWorkflowFailure(t, err, "failed")
		require.Len(t, env.ActivityCalls(), workflow.MaximumAttemptsDefault)
	})

	t.Run("RetriesExhausted", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, nil)
		weirtest.OnActivity(env, ChargeArgs{}).Return(nil, errors.New("bank down"))
		_, err := weirtest.ExecuteWorkflow(env, &ChargeWorkflow{Activity: retry3x(3)}, OrderArgs{ID: "o-1"})
		failure := requireWorkflowFailure(t, err, "failed")
		require.Contains(t, failure.Error(), "attempt 3")
		require.Contains(t, failure.Error(), "bank down")
		require.Len(t, env.ActivityCalls(), 3)
		require.Equal(t, 40*time.Second, env.Elapsed()) // 10s, then 30s
	})

	t.Run("RetriesFollowPolicyInSimulatedTime", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, nil)
		weirtest.OnActivity(env, ChargeArgs{}).Return(nil, errors.New("bank down")).Times(2)
		weirtest.OnActivity(env, ChargeArgs{}).Return(Charge{ID: "ch-1"}, nil)
		got, err := weirtest.ExecuteWorkflow(env, &ChargeWorkflow{Activity: retry3x(5)}, OrderArgs{ID: "o-1"})
		require.NoError(t, err)
		require.Equal(t, "ch-1", got)
		require.True(t, env.AssertExpectations())

		calls := env.ActivityCalls()
		require.Len(t, calls, 3)
		start := weirtest.StartDefault
		for i, want := range []time.Time{start, start.Add(10 * time.Second), start.Add(40 * time.Second)} {
			require.Equal(t, i+1, calls[i].Attempt)
			require.Equal(t, want, calls[i].Time, "attempt %d", i+1)
			require.Equal(t, calls[0].ScheduledEventID, calls[i].ScheduledEventID)
		}
		require.EqualError(t, calls[1].Err, "bank down")
		require.NoError(t, calls[2].Err)
		require.Equal(t, 40*time.Second, env.Elapsed())
		require.Equal(t, 2, env.Tasks(), "retries happen outside the workflow: one task to start, one for the outcome")
	})

	t.Run("ScheduleToCloseTimeout", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, nil)
		opts := retry3x(0)
		opts.ScheduleToCloseTimeout = 30 * time.Second
		weirtest.OnActivity(env, ChargeArgs{}).Return(nil, errors.New("bank down"))
		_, err := weirtest.ExecuteWorkflow(env, &ChargeWorkflow{Activity: opts}, OrderArgs{ID: "o-1"})
		failure := requireWorkflowFailure(t, err, "failed")
		require.Equal(t, "TimeoutError", failure.Cause.Type)
		require.Contains(t, failure.Error(), "ScheduleToClose")
		require.Len(t, env.ActivityCalls(), 2) // at 0s and 10s; the next would be at 40s
		require.Equal(t, 30*time.Second, env.Elapsed())
	})

	t.Run("SleepsThirtyDays", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, nil)
		woke, err := weirtest.ExecuteWorkflow(env, &SleepWorkflow{}, OrderArgs{ID: "720h"})
		require.NoError(t, err)
		require.Equal(t, 30*24*time.Hour, env.Elapsed())
		require.Equal(t, weirtest.StartDefault.AddDate(0, 0, 30), woke)
		require.Equal(t, 2, env.Tasks())
	})

	t.Run("TimesOut", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, nil)
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(Approve{By: "too late"}) }, 25*time.Hour)
		_, err := weirtest.ExecuteWorkflow(env, &ApprovalWorkflow{}, OrderArgs{ID: "o-1"})
		failure := requireWorkflowFailure(t, err, "failed")
		require.Equal(t, "ApprovalTimeout", failure.Type)
		require.Equal(t, 24*time.Hour, env.Elapsed())
		state, err := weirtest.QueryWorkflow[string](env, StateQuery{})
		require.NoError(t, err)
		require.Equal(t, "timed out", state)
	})

	t.Run("UnregisteredActivity", func(t *testing.T) {
		t.Parallel()
		env := weirtest.NewEnv(t, nil)
		env.SignalWorkflow(Approve{By: "ann"}) // before the start: delivered with it
		_, err := weirtest.ExecuteWorkflow(env, &ApprovalWorkflow{}, OrderArgs{ID: "o-1"})
		failure := requireWorkflowFailure(t, err, "failed")
		require.Equal(t, weirtest.FailureTypeActivityNotRegistered, failure.Cause.Type)
		require.Zero(t, env.Elapsed())
	})
}

type resumeArgs struct {
	To int `json:"to"`
}

func (resumeArgs) Kind() string { return "resume_count" }

// resumeActivity counts to To, heartbeating each step; its first attempt
// fails half-way, so the second must resume from the details.
type resumeActivity struct {
	activity.Defaults[resumeArgs, []int]
}

func (a *resumeActivity) Execute(ctx context.Context, args resumeArgs) ([]int, error) {
	info, _ := activity.GetInfo(ctx)
	start := 1
	if last, ok, err := activity.HeartbeatDetails[int](ctx); err != nil {
		return nil, err
	} else if ok {
		start = last + 1
	}
	var counted []int
	for i := start; i <= args.To; i++ {
		if info.Attempt == 1 && i > args.To/2 {
			return nil, errors.New("crash half-way")
		}
		counted = append(counted, i)
		if err := activity.Heartbeat(ctx, i); err != nil {
			return nil, err
		}
	}
	return counted, nil
}

type resumeWorkflow struct {
	workflow.Defaults[resumeArgs, []int]
}

func (w *resumeWorkflow) Run(ctx workflow.Context, args resumeArgs) ([]int, error) {
	return workflow.ExecuteActivity[[]int](ctx, args, nil).Get(ctx)
}

func TestHeartbeatDetailsInEnv(t *testing.T) {
	t.Parallel()
	env := weirtest.NewEnv(t, nil)
	weirtest.RegisterActivity(env, &resumeActivity{})
	counted, err := weirtest.ExecuteWorkflow(env, &resumeWorkflow{}, resumeArgs{To: 6})
	require.NoError(t, err)
	require.Equal(t, []int{4, 5, 6}, counted, "attempt 2 resumed from attempt 1's last heartbeat")
}
