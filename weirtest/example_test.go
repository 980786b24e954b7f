package weirtest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/weirtest"
	"github.com/weirhq/weir/workflow"
)

type ReminderArgs struct {
	Email string `json:"email"`
}

func (ReminderArgs) Kind() string { return "reminder" }

type SendEmailArgs struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func (SendEmailArgs) Kind() string { return "send_email" }

// ReminderWorkflow emails a reminder every week, four times.
type ReminderWorkflow struct {
	workflow.Defaults[ReminderArgs, int]
}

func (*ReminderWorkflow) Run(ctx workflow.Context, args ReminderArgs) (int, error) {
	sent := 0
	for week := 1; week <= 4; week++ {
		if err := workflow.Sleep(ctx, 7*24*time.Hour); err != nil {
			return sent, err
		}
		subject := fmt.Sprintf("week %d", week)
		if _, err := workflow.ExecuteActivity[string](ctx, SendEmailArgs{To: args.Email, Subject: subject}, nil).Get(ctx); err != nil {
			return sent, err
		}
		sent++
	}
	return sent, nil
}

// A month of workflow time runs in microseconds: the clock skips to the
// next timer whenever the workflow is blocked.
func Example() {
	env := weirtest.NewEnv(nil, nil)
	weirtest.OnActivity(env, SendEmailArgs{}).ReturnFunc(func(ctx context.Context, args SendEmailArgs) (any, error) {
		fmt.Println("email to", args.To+":", args.Subject, "on", env.Now().Format(time.DateOnly))
		return "sent", nil
	})
	sent, err := weirtest.ExecuteWorkflow(env, &ReminderWorkflow{}, ReminderArgs{Email: "ann@example.com"})
	fmt.Println(sent, err, "after", env.Elapsed())
	// Output:
	// email to ann@example.com: week 1 on 2026-01-08
	// email to ann@example.com: week 2 on 2026-01-15
	// email to ann@example.com: week 3 on 2026-01-22
	// email to ann@example.com: week 4 on 2026-01-29
	// 4 <nil> after 672h0m0s
}

// A mock that fails twice, then succeeds: the attempts follow the
// activity's retry policy (1s, then 2s by default) on the simulated clock.
func ExampleOnActivity() {
	env := weirtest.NewEnv(nil, nil)
	weirtest.OnActivity(env, SendEmailArgs{}).Return(nil, errors.New("smtp down")).Times(2)
	weirtest.OnActivity(env, SendEmailArgs{}).Return("sent", nil)
	sent, err := weirtest.ExecuteWorkflow(env, &ReminderWorkflow{}, ReminderArgs{Email: "ann@example.com"})
	fmt.Println(sent, err)
	for _, call := range env.ActivityCalls()[:4] {
		fmt.Println(call.Time.Format(time.DateTime), "attempt", call.Attempt, "error:", call.Err)
	}
	fmt.Println("expectations met:", env.AssertExpectations())
	// Output:
	// 4 <nil>
	// 2026-01-08 00:00:00 attempt 1 error: smtp down
	// 2026-01-08 00:00:01 attempt 2 error: smtp down
	// 2026-01-08 00:00:03 attempt 3 error: <nil>
	// 2026-01-15 00:00:03 attempt 1 error: <nil>
	// expectations met: true
}

type Approval struct {
	By string `json:"by"`
}

func (Approval) Kind() string { return "approval" }

type ExpenseArgs struct {
	Cents int `json:"cents"`
}

func (ExpenseArgs) Kind() string { return "expense" }

type StatusQuery struct{}

func (StatusQuery) Kind() string { return "status" }

// ExpenseWorkflow waits for an approval signal.
type ExpenseWorkflow struct {
	workflow.Defaults[ExpenseArgs, string]
}

func (*ExpenseWorkflow) Run(ctx workflow.Context, args ExpenseArgs) (string, error) {
	status := "waiting"
	workflow.SetQueryHandler(ctx, func(StatusQuery) (string, error) { return status, nil })
	approval, _ := workflow.GetSignalChannel[Approval](ctx).Receive(ctx)
	status = "approved by " + approval.By
	return fmt.Sprintf("%d cents %s at %s", args.Cents, status, workflow.Now(ctx).Format(time.TimeOnly)), nil
}

// Signals, queries and cancellation happen at simulated times, from
// delayed callbacks.
func ExampleEnv_RegisterDelayedCallback() {
	env := weirtest.NewEnv(nil, nil)
	env.RegisterDelayedCallback(func() {
		status, err := weirtest.QueryWorkflow[string](env, StatusQuery{})
		fmt.Println("at", env.Now().Format(time.TimeOnly), "status:", status, err)
	}, time.Hour)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(Approval{By: "bob"}) }, 90*time.Minute)
	result, err := weirtest.ExecuteWorkflow(env, &ExpenseWorkflow{}, ExpenseArgs{Cents: 4200})
	fmt.Println(result, err)
	// Output:
	// at 01:00:00 status: waiting <nil>
	// 4200 cents approved by bob at 01:30:00 <nil>
}

type GreetArgs struct {
	Name string `json:"name"`
}

func (GreetArgs) Kind() string { return "greet" }

// GreetActivity is a real activity, run by the Env as a worker would.
type GreetActivity struct {
	activity.Defaults[GreetArgs, string]
}

func (*GreetActivity) Execute(ctx context.Context, args GreetArgs) (string, error) {
	return "Hello, " + args.Name + "!", nil
}

// ExpenseWorkflowV2 greets the approver: a change made without
// workflow.GetVersion, which runs already approved can't replay.
type ExpenseWorkflowV2 struct {
	workflow.Defaults[ExpenseArgs, string]
}

func (*ExpenseWorkflowV2) Run(ctx workflow.Context, args ExpenseArgs) (string, error) {
	if _, err := workflow.ExecuteActivity[string](ctx, GreetArgs{Name: "approver"}, nil).Get(ctx); err != nil {
		return "", err
	}
	return (&ExpenseWorkflow{}).Run(ctx, args)
}

// Check new workflow code against a recorded history before deploying it.
// Here the history comes from an Env; in CI, commit histories exported with
// `weir workflow history --json` (or client.WriteHistoryJSON) and replay
// them with ReplayHistoryFile.
func ExampleReplayHistory() {
	env := weirtest.NewEnv(nil, nil)
	weirtest.RegisterActivity(env, &GreetActivity{})
	env.SignalWorkflow(Approval{By: "bob"})
	if _, err := weirtest.ExecuteWorkflow(env, &ExpenseWorkflow{}, ExpenseArgs{Cents: 100}); err != nil {
		panic(err)
	}
	var recorded bytes.Buffer
	if err := env.WriteHistoryJSON(&recorded); err != nil {
		panic(err)
	}

	ctx := context.Background()
	fmt.Println(weirtest.ReplayHistory(ctx, &ExpenseWorkflow{}, bytes.NewReader(recorded.Bytes())))
	err := weirtest.ReplayHistory(ctx, &ExpenseWorkflowV2{}, bytes.NewReader(recorded.Bytes()))
	var nde *workflow.NonDeterminismError
	if errors.As(err, &nde) {
		fmt.Println("diverges at event", nde.EventID, "- history has", nde.Expected+", code did", nde.Got)
	}
	// Output:
	// <nil>
	// diverges at event 4 - history has WorkflowCompleted, code did ActivityScheduled(kind "greet")
}

// An update at a simulated time, with its validator and its handler's
// activity: the callbacks hear what a client.Update caller would.
func ExampleUpdateWorkflow() {
	env := weirtest.NewEnv(nil, nil)
	weirtest.OnActivity(env, ChargeArgs{}).Return(Charge{ID: "ch_1"}, nil).After(time.Second)
	say := func(name string) *weirtest.UpdateCallbacks[int] {
		return &weirtest.UpdateCallbacks[int]{
			OnAccept:   func() { fmt.Println(name, "accepted at", env.Elapsed()) },
			OnReject:   func(err error) { fmt.Println(name, "rejected:", errors.Is(err, client.ErrUpdateRejected)) },
			OnComplete: func(n int, err error) { fmt.Println(name, "completed at", env.Elapsed(), "items:", n, err) },
		}
	}
	env.RegisterDelayedCallback(func() {
		weirtest.UpdateWorkflow(env, "add-book", AddItem{SKU: "book"}, say("add-book"))
		weirtest.UpdateWorkflow(env, "add-nothing", AddItem{}, say("add-nothing"))
	}, time.Hour)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(Checkout{}) }, 2*time.Hour)
	items, err := weirtest.ExecuteWorkflow(env, &CartWorkflow{}, OrderArgs{ID: "o-1"})
	fmt.Println(items, err)
	// Output:
	// add-nothing rejected: true
	// add-book accepted at 1h0m0s
	// add-book completed at 1h0m1s items: 1 <nil>
	// [book] <nil>
}
