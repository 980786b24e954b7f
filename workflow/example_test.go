package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

type OrderArgs struct {
	ID string `json:"id"`
}

func (OrderArgs) Kind() string { return "order" }

type ChargeArgs struct {
	Order string `json:"order"`
	Cents int64  `json:"cents"`
}

func (ChargeArgs) Kind() string { return "charge" }

type ShipArgs struct {
	Order string `json:"order"`
}

func (ShipArgs) Kind() string { return "ship" }

type Charge struct {
	ID string `json:"id"`
}

type Receipt struct {
	ChargeID   string `json:"charge_id"`
	TrackingID string `json:"tracking_id"`
}

type OrderWorkflow struct {
	workflow.Defaults[OrderArgs, Receipt]
}

func (w *OrderWorkflow) Run(ctx workflow.Context, args OrderArgs) (Receipt, error) {
	charge, err := workflow.ExecuteActivity[Charge](ctx, ChargeArgs{Order: args.ID, Cents: 4200}, nil).Get(ctx)
	if err != nil {
		return Receipt{}, fmt.Errorf("charging: %w", err)
	}
	tracking, err := workflow.ExecuteActivity[string](ctx, ShipArgs{Order: args.ID}, &workflow.ActivityOpts{
		Queue:       "shipping",
		RetryPolicy: &workflow.RetryPolicy{MaximumAttempts: 5},
	}).Get(ctx)
	if err != nil {
		return Receipt{}, fmt.Errorf("shipping: %w", err)
	}
	return Receipt{ChargeID: charge.ID, TrackingID: tracking}, nil
}

// worker is a stand-in for weir's worker: it keeps the history in memory,
// runs each workflow task with the engine and answers activities itself.
type worker struct {
	def     *replay.Definition
	history []history.Event
	task    int
}

func (w *worker) runTask(inputs ...history.Event) *replay.Outcome {
	w.task++
	out, err := replay.Execute(context.Background(), w.def, &replay.ExecuteParams{
		History: w.history,
		Inputs:  inputs,
		Now:     time.Date(2026, 11, 30, 12, 0, w.task, 0, time.UTC),
	})
	if err != nil {
		panic(err)
	}
	w.history = append(w.history, out.Events...)
	return out
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func Example() {
	w := &worker{def: replay.Bind(&OrderWorkflow{})}
	started := must(history.NewEvent(0, time.Time{}, &history.WorkflowStartedAttributes{Kind: "order", Args: []byte(`{"id":"o-1"}`)}))
	out := w.runTask(started)

	results := map[string]string{"charge": `{"id":"ch_1"}`, "ship": `"1Z999"`}
	for !out.Completed {
		var inputs []history.Event
		for _, a := range out.Activities {
			fmt.Printf("activity %s on queue %s: %s\n", a.Attributes.Kind, a.Attributes.Queue, a.Attributes.Args)
			inputs = append(inputs, must(history.NewEvent(0, time.Time{}, &history.ActivityCompletedAttributes{
				ScheduledEventID: a.EventID, Result: []byte(results[a.Attributes.Kind]), Attempt: 1,
			})))
		}
		out = w.runTask(inputs...)
	}
	var receipt Receipt
	_ = json.Unmarshal(out.Result, &receipt)
	fmt.Printf("receipt: %+v\n", receipt)
	for _, ev := range w.history {
		fmt.Println(ev.ID, ev.Type)
	}
	// Output:
	// activity charge on queue weir: {"order":"o-1","cents":4200}
	// activity ship on queue shipping: {"order":"o-1"}
	// receipt: {ChargeID:ch_1 TrackingID:1Z999}
	// 1 WorkflowStarted
	// 2 WorkflowTaskStarted
	// 3 ActivityScheduled
	// 4 ActivityCompleted
	// 5 WorkflowTaskStarted
	// 6 ActivityScheduled
	// 7 ActivityCompleted
	// 8 WorkflowTaskStarted
	// 9 WorkflowCompleted
}

// An activity's failure arrives as an *ActivityError wrapping the
// *ApplicationError the activity returned.
func ExampleActivityError() {
	def := replay.Bind(&OrderWorkflow{})
	w := &worker{def: def}
	w.runTask(must(history.NewEvent(0, time.Time{}, &history.WorkflowStartedAttributes{Kind: "order", Args: []byte(`{"id":"o-2"}`)})))
	out := w.runTask(must(history.NewEvent(0, time.Time{}, &history.ActivityFailedAttributes{
		ScheduledEventID: 3,
		Attempt:          25,
		Failure:          history.Failure{Message: "card declined", Type: "CardDeclined", NonRetryable: true},
	})))
	// The failure records each error of the chain with its own words.
	for f := out.Failure; f != nil; f = f.Cause {
		fmt.Println("failure:", f.Message)
	}

	// Inside workflow code the same error is matched like this:
	var err error = &workflow.ActivityError{Kind: "charge", ScheduledEventID: 3, Attempt: 25, Cause: &workflow.ApplicationError{Message: "card declined", Type: "CardDeclined"}}
	var appErr *workflow.ApplicationError
	if errors.As(err, &appErr) {
		fmt.Println("application error type:", appErr.Type)
	}
	// Output:
	// failure: charging
	// failure: activity charge (event 3, attempt 25) failed
	// failure: card declined
	// application error type: CardDeclined
}

// Select races futures deterministically: the future whose outcome entered
// history first wins, on every replay.
func ExampleSelector() {
	def := replay.Bind(&raceWorkflow{})
	w := &worker{def: def}
	w.runTask(must(history.NewEvent(0, time.Time{}, &history.WorkflowStartedAttributes{Kind: "order", Args: []byte(`{"id":"o-3"}`)})))
	// The shipment (event 4) finishes before the charge (event 3).
	out := w.runTask(
		must(history.NewEvent(0, time.Time{}, &history.ActivityCompletedAttributes{ScheduledEventID: 4, Result: []byte(`"1Z999"`)})),
		must(history.NewEvent(0, time.Time{}, &history.ActivityCompletedAttributes{ScheduledEventID: 3, Result: []byte(`{"id":"ch_1"}`)})),
	)
	fmt.Println(string(out.Result))
	// Output:
	// "ship first"
}

type raceWorkflow struct {
	workflow.Defaults[OrderArgs, string]
}

func (*raceWorkflow) Run(ctx workflow.Context, args OrderArgs) (string, error) {
	charge := workflow.ExecuteActivity[Charge](ctx, ChargeArgs{Order: args.ID}, nil)
	ship := workflow.ExecuteActivity[string](ctx, ShipArgs{Order: args.ID}, nil)
	winner := ""
	workflow.NewSelector(ctx).
		AddFuture(charge, func() { winner = "charge first" }).
		AddFuture(ship, func() { winner = "ship first" }).
		Select(ctx)
	return winner, nil
}

// SideEffect records a non-deterministic value once; replays get the
// recorded value.
func ExampleSideEffect() {
	def := &replay.Definition{Kind: "order", Run: func(ctx workflow.Context, _ []byte) ([]byte, error) {
		n := workflow.SideEffect(ctx, func() int { return 4 }) // chosen by a fair dice roll
		return json.Marshal(n)
	}}
	w := &worker{def: def}
	out := w.runTask(must(history.NewEvent(0, time.Time{}, &history.WorkflowStartedAttributes{Kind: "order"})))
	fmt.Println(string(out.Result), out.Events[2].Type)
	// Output:
	// 4 MarkerRecorded
}

// ReminderArgs let a CLI or HTTP caller write durations as "168h".
type ReminderArgs struct {
	After workflow.Duration `json:"after"`
}

func ExampleDuration() {
	var args ReminderArgs
	_ = json.Unmarshal([]byte(`{"after": "168h"}`), &args)
	fmt.Println(time.Duration(args.After))
	_ = json.Unmarshal([]byte(`{"after": 90000000000}`), &args) // nanoseconds, as time.Duration encodes
	fmt.Println(args.After)
	encoded, _ := json.Marshal(ReminderArgs{After: workflow.Duration(36 * time.Hour)})
	fmt.Println(string(encoded))
	// Output:
	// 168h0m0s
	// 1m30s
	// {"after":"36h0m0s"}
}
