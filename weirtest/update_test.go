package weirtest_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/weirtest"
	"github.com/weirhq/weir/workflow"
)

type AddItem struct {
	SKU string `json:"sku"`
}

func (AddItem) Kind() string { return "add_item" }

type Checkout struct{}

func (Checkout) Kind() string { return "checkout" }

type UnknownUpdate struct{}

func (UnknownUpdate) Kind() string { return "unknown_update" }

// CartWorkflow takes add_item updates (a SKU is required; "broken" fails in
// the handler), charging each through an activity, until a checkout signal
// or a week without one.
type CartWorkflow struct {
	workflow.Defaults[OrderArgs, []string]
}

func (*CartWorkflow) Run(ctx workflow.Context, args OrderArgs) ([]string, error) {
	var items []string
	workflow.SetUpdateHandler(ctx, func(ctx workflow.Context, add AddItem) (int, error) {
		if add.SKU == "broken" {
			return 0, &workflow.ApplicationError{Message: "no such item", Type: "NoSuchItem"}
		}
		if _, err := workflow.ExecuteActivity[Charge](ctx, ChargeArgs{Order: add.SKU}, nil).Get(ctx); err != nil {
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
	checkout := workflow.GetSignalChannel[Checkout](ctx)
	timeout := workflow.NewTimer(ctx, 7*24*time.Hour)
	workflow.NewSelector(ctx).
		AddReceive(checkout, func() { checkout.Receive(ctx) }).
		AddFuture(timeout, func() {}).
		Select(ctx)
	return items, nil
}

// answers collects what UpdateCallbacks hear, in order.
type answers struct {
	log []string
	at  []time.Duration
	env *weirtest.Env
}

func (a *answers) callbacks(name string) *weirtest.UpdateCallbacks[int] {
	note := func(s string) {
		a.log = append(a.log, name+": "+s)
		a.at = append(a.at, a.env.Elapsed())
	}
	return &weirtest.UpdateCallbacks[int]{
		OnAccept: func() { note("accepted") },
		OnReject: func(err error) {
			var rejected *client.UpdateRejectedError
			if !errors.As(err, &rejected) || !errors.Is(err, client.ErrUpdateRejected) {
				note("reject of wrong type " + err.Error())
				return
			}
			note("rejected " + rejected.Failure.Type + " " + rejected.Failure.Message)
		},
		OnComplete: func(n int, err error) {
			if err != nil {
				var failed *client.UpdateFailedError
				if !errors.As(err, &failed) || !errors.Is(err, client.ErrUpdateFailed) {
					note("failure of wrong type " + err.Error())
					return
				}
				note("failed " + failed.Failure.Type)
				return
			}
			note("completed " + strings.Repeat("+", n))
		},
	}
}

func TestUpdateWorkflow(t *testing.T) {
	env := weirtest.NewEnv(t, nil)
	a := &answers{env: env}
	weirtest.OnActivity(env, ChargeArgs{}).Return(Charge{ID: "c"}, nil).After(time.Minute)

	weirtest.UpdateWorkflow(env, "u0", AddItem{SKU: "early"}, a.callbacks("u0")) // before the first task
	env.RegisterDelayedCallback(func() {
		weirtest.UpdateWorkflow(env, "u1", AddItem{SKU: "book"}, a.callbacks("u1"))
		weirtest.UpdateWorkflow(env, "u2", AddItem{}, a.callbacks("u2"))
		weirtest.UpdateWorkflow(env, "u3", AddItem{SKU: "broken"}, a.callbacks("u3"))
		weirtest.UpdateWorkflow(env, "u4", UnknownUpdate{}, a.callbacks("u4"))
	}, time.Hour)
	env.RegisterDelayedCallback(func() {
		weirtest.UpdateWorkflow(env, "u1", AddItem{SKU: "book"}, a.callbacks("u1 again")) // same ID: same answer, no second item
		env.SignalWorkflow(Checkout{})
	}, 2*time.Hour)

	items, err := weirtest.ExecuteWorkflow(env, &CartWorkflow{}, OrderArgs{ID: "o"})
	require.NoError(t, err)
	require.Equal(t, []string{"early", "book"}, items)
	require.Equal(t, []string{
		"u0: accepted",
		"u0: completed +",
		"u2: rejected UpdateRejected sku is required",
		`u4: rejected UnknownUpdate no handler for update "unknown_update" (handlers: [add_item])`,
		"u1: accepted",
		"u3: accepted",
		"u3: failed NoSuchItem",
		"u1: completed ++",
		"u1 again: accepted",
		"u1 again: completed ++",
	}, a.log)
	require.Equal(t, []time.Duration{0, time.Minute, time.Hour, time.Hour, time.Hour, time.Hour, time.Hour, time.Hour + time.Minute, 2 * time.Hour, 2 * time.Hour}, a.at)
	require.Len(t, weirtest.ActivityCallsOf[ChargeArgs](env), 2)
}

func TestUpdateWorkflowClosedBeforeCompletion(t *testing.T) {
	env := weirtest.NewEnv(t, nil)
	a := &answers{env: env}
	weirtest.OnActivity(env, ChargeArgs{}).Return(Charge{ID: "c"}, nil).After(time.Hour)
	env.RegisterDelayedCallback(func() {
		weirtest.UpdateWorkflow(env, "slow", AddItem{SKU: "slow"}, a.callbacks("slow"))
		env.SignalWorkflow(Checkout{})
	}, time.Minute)

	items, err := weirtest.ExecuteWorkflow(env, &CartWorkflow{}, OrderArgs{ID: "o"})
	require.NoError(t, err)
	require.Empty(t, items)
	require.Equal(t, []string{
		"slow: accepted",
		"slow: rejected WorkflowClosed the workflow closed before the update completed",
	}, a.log)

	// After the run: rejected at once.
	weirtest.UpdateWorkflow(env, "late", AddItem{SKU: "late"}, a.callbacks("late"))
	require.Equal(t, "late: rejected WorkflowClosed the workflow closed before the update completed", a.log[len(a.log)-1])
}
