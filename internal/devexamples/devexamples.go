// Package devexamples is what `weir dev --examples` runs: small versions of
// the programs in examples/ (hello, order-saga, approval), registered on a
// worker of their own queue, and a fixed set of runs of them with varied
// outcomes, so that a new user finds the web UI populated.
//
// The workflows keep the examples' kinds and run on weir's default queue,
// as the example programs and `weir workflow start` do, so a run started
// from the CLI runs on `weir dev --examples`. (Run the example programs on
// another schema than `weir dev`'s, or either may take the other's tasks.)
package devexamples

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// Queue is the River queue of the example workflows and their activities:
// weir's default queue.
const Queue = client.QueueDefault

// Queues is the worker configuration serving Queue.
func Queues() map[string]river.QueueConfig {
	return map[string]river.QueueConfig{Queue: {MaxWorkers: 10}}
}

// Register adds the example workflows and activities to w, whose Queues
// must include Queue.
func Register(w *worker.Worker) {
	worker.AddWorkflow(w, &HelloWorkflow{})
	worker.AddActivity(w, &GreetActivity{})

	worker.AddWorkflow(w, &OrderWorkflow{})
	worker.AddActivity(w, &stepActivity[ReserveArgs]{name: "reserve", failure: "out of stock", prefix: "res-"})
	worker.AddActivity(w, &stepActivity[ChargeArgs]{name: "charge", failure: "card declined", prefix: "ch-"})
	worker.AddActivity(w, &stepActivity[ShipArgs]{name: "ship", failure: "no carrier available", prefix: "1Z-"})
	worker.AddActivity(w, &noopActivity[ReleaseArgs]{})
	worker.AddActivity(w, &noopActivity[RefundArgs]{})

	worker.AddWorkflow(w, &ApprovalWorkflow{})
	worker.AddActivity(w, &noopActivity[NotifyArgs]{})
}

// Example is one run Start starts.
type Example struct {
	WorkflowID string
	Args       client.WorkflowArgs
	// Want is the state the run ends in (or stays in): completed, failed
	// or running.
	Want string
	// About says what it shows.
	About string
}

// Examples are the runs Start starts, in order.
func Examples() []Example {
	return []Example{
		{WorkflowID: "hello-ada", Args: HelloArgs{Name: "Ada"}, Want: "completed",
			About: "one activity, a typed result"},
		{WorkflowID: "hello-nobody", Args: HelloArgs{Name: ""}, Want: "failed",
			About: "a non-retryable activity error fails the run"},
		{WorkflowID: "order-1001", Args: OrderArgs{ID: "1001", SKU: "widget", Qty: 2, Cents: 4200}, Want: "completed",
			About: "saga: reserve, charge, ship"},
		{WorkflowID: "order-1002", Args: OrderArgs{ID: "1002", SKU: "gadget", Qty: 1, Cents: 9900, FailAt: "ship"}, Want: "failed",
			About: "saga: shipping fails, the charge is refunded and the reservation released"},
		{WorkflowID: "approval-r-1", Args: ApprovalArgs{RequestID: "r-1", Requester: "alice", Amount: 1200, Deadline: workflow.Duration(7 * 24 * time.Hour)}, Want: "running",
			About: "waits for a decision signal or a 7-day timer"},
	}
}

// Started is the outcome of starting one Example.
type Started struct {
	Example

	// Run is the example's run, nil when it was skipped.
	Run *client.Run

	// Skipped says why the example was not started: its workflow ID has a
	// live run that another start created (client.ErrWorkflowAlreadyStarted),
	// or its request ID was used with other args, by another version of
	// weir (client.ErrRequestConflict).
	Skipped error
}

// Start starts the Examples through c, idempotently: each has a fixed
// workflow ID and request ID, so starting them again (another `weir dev
// --examples` on the same database) returns the runs the first start
// created. It returns the outcomes in the order of Examples, and an error
// only when it could not start one for another reason.
func Start(ctx context.Context, c *client.Client) ([]*Started, error) {
	var started []*Started
	for _, ex := range Examples() {
		run, err := c.Start(ctx, ex.Args, &client.StartOpts{
			WorkflowID: ex.WorkflowID,
			RequestID:  "weir-dev-examples-" + ex.WorkflowID,
			Queue:      Queue,
		})
		switch {
		case errors.Is(err, client.ErrWorkflowAlreadyStarted), errors.Is(err, client.ErrRequestConflict):
			started = append(started, &Started{Example: ex, Skipped: err})
		case err != nil:
			return started, fmt.Errorf("starting example %s: %w", ex.WorkflowID, err)
		default:
			started = append(started, &Started{Example: ex, Run: run})
		}
	}
	return started, nil
}

// activityOpts put every activity on Queue.
var activityOpts = &workflow.ActivityOpts{
	Queue:               Queue,
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         &workflow.RetryPolicy{MaximumAttempts: 10},
}

// --- hello (examples/hello) ---

// HelloArgs start a HelloWorkflow.
type HelloArgs struct {
	Name string `json:"name"`
}

func (HelloArgs) Kind() string { return "hello" }

// HelloWorkflow greets Name through GreetActivity.
type HelloWorkflow struct {
	workflow.Defaults[HelloArgs, string]
}

func (*HelloWorkflow) Opts() *workflow.Opts { return &workflow.Opts{ActivityOpts: activityOpts} }

func (*HelloWorkflow) Run(ctx workflow.Context, args HelloArgs) (string, error) {
	greeting, err := workflow.ExecuteActivity[string](ctx, GreetArgs(args), nil).Get(ctx)
	if err != nil {
		return "", fmt.Errorf("greeting: %w", err)
	}
	return greeting, nil
}

// GreetArgs are GreetActivity's arguments.
type GreetArgs struct {
	Name string `json:"name"`
}

func (GreetArgs) Kind() string { return "hello.greet" }

// GreetActivity formats a greeting; an empty name fails it for good.
type GreetActivity struct {
	activity.Defaults[GreetArgs, string]
}

func (*GreetActivity) Execute(_ context.Context, args GreetArgs) (string, error) {
	if args.Name == "" {
		return "", &workflow.ApplicationError{Message: "name is required", Type: "InvalidName", NonRetryable: true}
	}
	return "Hello, " + args.Name + "!", nil
}

// --- order saga (examples/order-saga) ---

// OrderArgs start an OrderWorkflow; FailAt names a step that fails for good
// ("reserve", "charge", "ship" or "").
type OrderArgs struct {
	ID     string `json:"id"`
	SKU    string `json:"sku"`
	Qty    int    `json:"qty"`
	Cents  int64  `json:"cents"`
	FailAt string `json:"fail_at,omitempty"`
}

func (OrderArgs) Kind() string { return "saga.order" }

// Receipt is an OrderWorkflow's result.
type Receipt struct {
	ReservationID string `json:"reservation_id"`
	ChargeID      string `json:"charge_id"`
	TrackingID    string `json:"tracking_id"`
}

// OrderWorkflow reserves, charges and ships; when a step fails its saga
// undoes the steps done so far.
type OrderWorkflow struct {
	workflow.Defaults[OrderArgs, Receipt]
}

func (*OrderWorkflow) Opts() *workflow.Opts { return &workflow.Opts{ActivityOpts: activityOpts} }

func (*OrderWorkflow) Run(ctx workflow.Context, args OrderArgs) (Receipt, error) {
	saga := workflow.NewSaga(ctx, &workflow.SagaOpts{StopOnError: true})
	fail := func(step string, err error) (Receipt, error) {
		if cerr := saga.Compensate(); cerr != nil {
			return Receipt{}, fmt.Errorf("%s failed: %w; compensation failed too: %v", step, err, cerr)
		}
		return Receipt{}, fmt.Errorf("%s failed, order compensated: %w", step, err)
	}

	step := StepArgs{Order: args.ID, SKU: args.SKU, Qty: args.Qty, Cents: args.Cents, FailAt: args.FailAt}
	reservation, err := workflow.ExecuteActivity[string](ctx, ReserveArgs(step), nil).Get(ctx)
	if err != nil {
		return fail("reserve", err)
	}
	saga.AddCompensation(func(ctx workflow.Context) error {
		_, err := workflow.ExecuteActivity[struct{}](ctx, ReleaseArgs{Order: args.ID, ID: reservation}, nil).Get(ctx)
		return err
	})
	charge, err := workflow.ExecuteActivity[string](ctx, ChargeArgs(step), nil).Get(ctx)
	if err != nil {
		return fail("charge", err)
	}
	saga.AddCompensation(func(ctx workflow.Context) error {
		_, err := workflow.ExecuteActivity[struct{}](ctx, RefundArgs{Order: args.ID, ID: charge}, nil).Get(ctx)
		return err
	})
	tracking, err := workflow.ExecuteActivity[string](ctx, ShipArgs(step), nil).Get(ctx)
	if err != nil {
		return fail("ship", err)
	}
	return Receipt{ReservationID: reservation, ChargeID: charge, TrackingID: tracking}, nil
}

// StepArgs are the arguments of a saga step.
type StepArgs struct {
	Order  string `json:"order"`
	SKU    string `json:"sku,omitempty"`
	Qty    int    `json:"qty,omitempty"`
	Cents  int64  `json:"cents,omitempty"`
	FailAt string `json:"fail_at,omitempty"`
}

// UndoArgs are the arguments of a compensation.
type UndoArgs struct {
	Order string `json:"order"`
	ID    string `json:"id"`
}

type (
	ReserveArgs StepArgs
	ChargeArgs  StepArgs
	ShipArgs    StepArgs
	ReleaseArgs UndoArgs
	RefundArgs  UndoArgs
)

func (ReserveArgs) Kind() string { return "saga.reserve" }
func (ChargeArgs) Kind() string  { return "saga.charge" }
func (ShipArgs) Kind() string    { return "saga.ship" }
func (ReleaseArgs) Kind() string { return "saga.release" }
func (RefundArgs) Kind() string  { return "saga.refund" }

func (a ReserveArgs) step() StepArgs { return StepArgs(a) }
func (a ChargeArgs) step() StepArgs  { return StepArgs(a) }
func (a ShipArgs) step() StepArgs    { return StepArgs(a) }

// stepActivity is a saga step: it fails for good when its args' FailAt
// names it, and returns prefix and the order's ID otherwise.
type stepActivity[A interface {
	activity.Args
	step() StepArgs
}] struct {
	activity.Defaults[A, string]
	name, failure, prefix string
}

func (s *stepActivity[A]) Execute(_ context.Context, args A) (string, error) {
	if step := args.step(); step.FailAt != s.name {
		return s.prefix + step.Order, nil
	}
	return "", &workflow.ApplicationError{Message: s.failure, Type: "StepFailed", NonRetryable: true}
}

// noopActivity stands in for a compensation or an email: it does nothing.
type noopActivity[A activity.Args] struct {
	activity.Defaults[A, struct{}]
}

func (*noopActivity[A]) Execute(context.Context, A) (struct{}, error) { return struct{}{}, nil }

// --- approval (examples/approval) ---

// ApprovalArgs start an ApprovalWorkflow.
type ApprovalArgs struct {
	RequestID string            `json:"request_id"`
	Requester string            `json:"requester"`
	Amount    int64             `json:"amount"`
	Deadline  workflow.Duration `json:"deadline"` // "168h" or nanoseconds
}

func (ApprovalArgs) Kind() string { return "approval" }

// Decision is the signal that decides an approval.
type Decision struct {
	Approved bool   `json:"approved"`
	By       string `json:"by"`
}

func (Decision) Kind() string { return "approval.decision" }

// StatusQuery asks an approval for its Status.
type StatusQuery struct{}

func (StatusQuery) Kind() string { return "approval.status" }

// Status answers StatusQuery and is the approval's result.
type Status struct {
	State     string    `json:"state"` // pending, approved, rejected, expired
	DecidedBy string    `json:"decided_by,omitempty"`
	Deadline  time.Time `json:"deadline"`
}

// ApprovalWorkflow waits for a Decision until the deadline, then notifies
// the requester.
type ApprovalWorkflow struct {
	workflow.Defaults[ApprovalArgs, Status]
}

func (*ApprovalWorkflow) Opts() *workflow.Opts { return &workflow.Opts{ActivityOpts: activityOpts} }

func (*ApprovalWorkflow) Run(ctx workflow.Context, args ApprovalArgs) (Status, error) {
	status := Status{State: "pending", Deadline: workflow.Now(ctx).Add(time.Duration(args.Deadline))}
	workflow.SetQueryHandler(ctx, func(StatusQuery) (Status, error) { return status, nil })

	decisions := workflow.GetSignalChannel[Decision](ctx)
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	deadline := workflow.NewTimer(timerCtx, time.Duration(args.Deadline))

	var decision *Decision
	for decision == nil && !deadline.IsReady() {
		var err error
		workflow.NewSelector(ctx).
			AddReceive(decisions, func() {
				var d Decision
				var ok bool
				if d, ok, err = decisions.TryReceive(ctx); ok && err == nil {
					decision = &d
				}
			}).
			AddFuture(deadline, func() {}).
			Select(ctx)
		if err != nil {
			workflow.GetLogger(ctx).Warn("ignoring a malformed decision", "error", err)
		}
		if ctx.Err() != nil {
			status.State = "cancelled"
			return status, ctx.Err()
		}
	}
	cancelTimer()

	switch {
	case decision == nil:
		status.State = "expired"
	case decision.Approved:
		status.State, status.DecidedBy = "approved", decision.By
	default:
		status.State, status.DecidedBy = "rejected", decision.By
	}
	_, err := workflow.ExecuteActivity[struct{}](ctx, NotifyArgs{To: args.Requester, RequestID: args.RequestID, State: status.State}, nil).Get(ctx)
	if err != nil {
		return status, fmt.Errorf("notifying %s: %w", args.Requester, err)
	}
	return status, nil
}

// NotifyArgs tell a requester an approval's outcome.
type NotifyArgs struct {
	To        string `json:"to"`
	RequestID string `json:"request_id"`
	State     string `json:"state"`
}

func (NotifyArgs) Kind() string { return "approval.notify" }
