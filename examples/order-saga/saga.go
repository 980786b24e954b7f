package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/workflow"
)

// --- The workflow ---

// OrderArgs start an order workflow.
type OrderArgs struct {
	ID    string `json:"id"`
	SKU   string `json:"sku"`
	Qty   int    `json:"qty"`
	Cents int64  `json:"cents"`
}

func (OrderArgs) Kind() string { return "saga.order" }

// Receipt is the workflow's result.
type Receipt struct {
	ReservationID string `json:"reservation_id"`
	ChargeID      string `json:"charge_id"`
	TrackingID    string `json:"tracking_id"`
}

// OrderWorkflow reserves inventory, charges the customer and ships. When a
// step fails, it undoes the steps that succeeded, in reverse order, and
// fails with the original error.
type OrderWorkflow struct {
	workflow.Defaults[OrderArgs, Receipt]
}

// Opts give every activity of the workflow a retry policy: transient
// failures are retried with backoff; a non-retryable ApplicationError (a
// declined card) fails the step at once.
func (*OrderWorkflow) Opts() *workflow.Opts {
	return &workflow.Opts{ActivityOpts: &workflow.ActivityOpts{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &workflow.RetryPolicy{MaximumAttempts: 10},
	}}
}

func (w *OrderWorkflow) Run(ctx workflow.Context, args OrderArgs) (Receipt, error) {
	// compensations undo the steps done so far. They are plain closures: the
	// workflow's code is replayed deterministically, so the slice is rebuilt
	// the same way on every replay.
	var compensations []func(ctx workflow.Context) error
	fail := func(step string, err error) (Receipt, error) {
		// Compensate on a disconnected context, so that the undo still runs
		// when the run is being cancelled. (A cancelled run gets here with an
		// err wrapping workflow.ErrCanceled; returned wrapped, it ends the
		// run as cancelled rather than failed.)
		cctx := workflow.NewDisconnectedContext(ctx)
		for i := len(compensations) - 1; i >= 0; i-- {
			if cerr := compensations[i](cctx); cerr != nil {
				// An undo that failed after all its retries needs a human:
				// say so in the workflow's failure.
				return Receipt{}, fmt.Errorf("%s failed: %w; compensation failed too: %v", step, err, cerr)
			}
		}
		return Receipt{}, fmt.Errorf("%s failed, order compensated: %w", step, err)
	}

	reservation, err := workflow.ExecuteActivity[string](ctx, ReserveArgs{Order: args.ID, SKU: args.SKU, Qty: args.Qty}, nil).Get(ctx)
	if err != nil {
		return fail("reserve", err)
	}
	compensations = append(compensations, func(ctx workflow.Context) error {
		_, err := workflow.ExecuteActivity[struct{}](ctx, ReleaseArgs{Order: args.ID, ReservationID: reservation}, nil).Get(ctx)
		return err
	})

	charge, err := workflow.ExecuteActivity[string](ctx, ChargeArgs{Order: args.ID, Cents: args.Cents}, nil).Get(ctx)
	if err != nil {
		return fail("charge", err)
	}
	compensations = append(compensations, func(ctx workflow.Context) error {
		_, err := workflow.ExecuteActivity[struct{}](ctx, RefundArgs{Order: args.ID, ChargeID: charge, Cents: args.Cents}, nil).Get(ctx)
		return err
	})

	tracking, err := workflow.ExecuteActivity[string](ctx, ShipArgs{Order: args.ID, SKU: args.SKU, Qty: args.Qty}, nil).Get(ctx)
	if err != nil {
		return fail("ship", err)
	}
	return Receipt{ReservationID: reservation, ChargeID: charge, TrackingID: tracking}, nil
}

// --- Activity args (each Kind is also the River job kind) ---

type ReserveArgs struct {
	Order string `json:"order"`
	SKU   string `json:"sku"`
	Qty   int    `json:"qty"`
}

func (ReserveArgs) Kind() string { return "saga.reserve" }

type ReleaseArgs struct {
	Order         string `json:"order"`
	ReservationID string `json:"reservation_id"`
}

func (ReleaseArgs) Kind() string { return "saga.release" }

type ChargeArgs struct {
	Order string `json:"order"`
	Cents int64  `json:"cents"`
}

func (ChargeArgs) Kind() string { return "saga.charge" }

type RefundArgs struct {
	Order    string `json:"order"`
	ChargeID string `json:"charge_id"`
	Cents    int64  `json:"cents"`
}

func (RefundArgs) Kind() string { return "saga.refund" }

type ShipArgs struct {
	Order string `json:"order"`
	SKU   string `json:"sku"`
	Qty   int    `json:"qty"`
}

func (ShipArgs) Kind() string { return "saga.ship" }

// --- Activities ---

// Shop stands in for the inventory, payment and shipping services. Every
// call is idempotent per order (activities are retried, so a real one would
// pass the order ID as an idempotency key), and FailAt makes one step fail
// for good.
type Shop struct {
	FailAt string // "reserve", "charge", "ship" or ""

	mu  sync.Mutex
	out io.Writer
}

func (s *Shop) logf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, format+"\n", args...)
}

// failure is what a step injected to fail returns: non-retryable, so the
// workflow sees it at once instead of after every retry.
func (s *Shop) failure(step, message string) error {
	if s.FailAt != step {
		return nil
	}
	s.logf("  %-9s FAILED: %s", step, message)
	return &workflow.ApplicationError{Message: message, Type: "StepFailed", NonRetryable: true}
}

type ReserveActivity struct {
	activity.Defaults[ReserveArgs, string]
	Shop *Shop
}

func (a *ReserveActivity) Execute(ctx context.Context, args ReserveArgs) (string, error) {
	if err := a.Shop.failure("reserve", "out of stock"); err != nil {
		return "", err
	}
	id := "res-" + args.Order
	a.Shop.logf("  reserve   %d × %s (%s)", args.Qty, args.SKU, id)
	return id, nil
}

type ReleaseActivity struct {
	activity.Defaults[ReleaseArgs, struct{}]
	Shop *Shop
}

func (a *ReleaseActivity) Execute(ctx context.Context, args ReleaseArgs) (struct{}, error) {
	a.Shop.logf("  undo      release %s", args.ReservationID)
	return struct{}{}, nil
}

type ChargeActivity struct {
	activity.Defaults[ChargeArgs, string]
	Shop *Shop
}

func (a *ChargeActivity) Execute(ctx context.Context, args ChargeArgs) (string, error) {
	if err := a.Shop.failure("charge", "card declined"); err != nil {
		return "", err
	}
	id := "ch-" + args.Order
	a.Shop.logf("  charge    %d cents (%s)", args.Cents, id)
	return id, nil
}

type RefundActivity struct {
	activity.Defaults[RefundArgs, struct{}]
	Shop *Shop
}

func (a *RefundActivity) Execute(ctx context.Context, args RefundArgs) (struct{}, error) {
	a.Shop.logf("  undo      refund %d cents (%s)", args.Cents, args.ChargeID)
	return struct{}{}, nil
}

type ShipActivity struct {
	activity.Defaults[ShipArgs, string]
	Shop *Shop
}

func (a *ShipActivity) Execute(ctx context.Context, args ShipArgs) (string, error) {
	if err := a.Shop.failure("ship", "no carrier available"); err != nil {
		return "", err
	}
	id := "1Z-" + args.Order
	a.Shop.logf("  ship      %d × %s (%s)", args.Qty, args.SKU, id)
	return id, nil
}
