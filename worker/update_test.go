package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

type ReserveArgs struct {
	SKU string `json:"sku"`
}

func (ReserveArgs) Kind() string { return "reserve" }

// ReserveActivity reserves stock; "slow" SKUs wait for their context.
type ReserveActivity struct {
	activity.Defaults[ReserveArgs, string]
	calls atomic.Int64
}

func (a *ReserveActivity) Execute(ctx context.Context, args ReserveArgs) (string, error) {
	a.calls.Add(1)
	if args.SKU == "slow" {
		<-ctx.Done()
		return "", ctx.Err()
	}
	return "reserved " + args.SKU, nil
}

type AddToCart struct {
	SKU string `json:"sku"`
}

func (AddToCart) Kind() string { return "add_to_cart" }

type Unhandled struct{}

func (Unhandled) Kind() string { return "unhandled" }

type CartArgs struct{}

func (CartArgs) Kind() string { return "cart" }

type CartWorkflow struct {
	workflow.Defaults[CartArgs, []string]
}

// Run adds items by update (each reserved by an activity) until checkout.
func (w *CartWorkflow) Run(ctx workflow.Context, _ CartArgs) ([]string, error) {
	var items []string
	workflow.SetUpdateHandler(ctx, func(ctx workflow.Context, add AddToCart) (int, error) {
		if add.SKU == "broken" {
			return 0, &workflow.ApplicationError{Message: "cannot add a broken item", Type: "Broken"}
		}
		reserved, err := workflow.ExecuteActivity[string](ctx, ReserveArgs(add), nil).Get(ctx)
		if err != nil {
			return 0, err
		}
		items = append(items, reserved)
		return len(items), nil
	}, &workflow.UpdateHandlerOpts[AddToCart]{Validator: func(add AddToCart) error {
		if add.SKU == "" {
			return errors.New("a SKU is required")
		}
		return nil
	}})
	_, err := workflow.GetSignalChannel[DoneSignal](ctx).Receive(ctx)
	return items, err
}

func TestUpdates(t *testing.T) {
	t.Parallel()

	start := func(ctx context.Context, t *testing.T, b *testBundle) *ReserveActivity {
		t.Helper()
		reserve := &ReserveActivity{}
		w, err := worker.New(b.pool, &worker.Config{Schema: b.schema, SweepInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		worker.AddWorkflow(w, &CartWorkflow{})
		worker.AddActivity(w, reserve)
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			require.NoError(t, w.Stop(stopCtx))
		})
		return reserve
	}
	update := func(ctx context.Context, t *testing.T, c *client.Client, run *client.Run, args client.UpdateArgs, opts *client.UpdateOpts) (int, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		var n int
		err := c.Update(ctx, run.WorkflowID, run.RunID, args, &n, opts)
		return n, err
	}

	t.Run("AcceptedRejectedFailedAndIdempotent", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		reserve := start(ctx, t, b)

		run, err := b.client.Start(ctx, CartArgs{}, nil)
		require.NoError(t, err)

		// Sent before the first task ran: deferred until a handler exists.
		n, err := update(ctx, t, b.client, run, AddToCart{SKU: "apple"}, &client.UpdateOpts{UpdateID: "add-apple"})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		n, err = update(ctx, t, b.client, run, AddToCart{SKU: "pear"}, nil)
		require.NoError(t, err)
		require.Equal(t, 2, n)

		// The same update ID again: the first answer, no second effect.
		n, err = update(ctx, t, b.client, run, AddToCart{SKU: "apple"}, &client.UpdateOpts{UpdateID: "add-apple"})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, int64(2), reserve.calls.Load())

		_, err = update(ctx, t, b.client, run, AddToCart{}, nil)
		var rejected *client.UpdateRejectedError
		require.ErrorAs(t, err, &rejected)
		require.ErrorIs(t, err, client.ErrUpdateRejected)
		require.Contains(t, rejected.Failure.Message, "a SKU is required")

		_, err = update(ctx, t, b.client, run, Unhandled{}, nil)
		require.ErrorAs(t, err, &rejected)
		require.Equal(t, "UnknownUpdate", rejected.Failure.Type)

		_, err = update(ctx, t, b.client, run, AddToCart{SKU: "broken"}, nil)
		var failed *client.UpdateFailedError
		require.ErrorAs(t, err, &failed)
		require.ErrorIs(t, err, client.ErrUpdateFailed)
		require.Equal(t, "Broken", failed.Failure.Type)

		require.NoError(t, b.client.Signal(ctx, run.WorkflowID, uuid.Nil, DoneSignal{}, nil))
		items, err := getWithin[[]string](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, []string{"reserved apple", "reserved pear"}, items)

		// History: accepted updates only; the rejected ones left no trace.
		var accepted, completed int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE type = 'UpdateAccepted'), count(*) FILTER (WHERE type = 'UpdateCompleted')"+
			" FROM "+b.names.History+" WHERE run_id = $1", run.RunID).Scan(&accepted, &completed))
		require.Equal(t, 3, accepted, "apple, pear, broken")
		require.Equal(t, 3, completed)
		requireHistoryWellFormed(ctx, t, b, run)
	})

	t.Run("RejectedUpdatesRecordNothing", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		start(ctx, t, b)

		run, err := b.client.Start(ctx, CartArgs{}, nil)
		require.NoError(t, err)
		n, err := update(ctx, t, b.client, run, AddToCart{SKU: "apple"}, nil)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		length := func() int64 {
			var next int64
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT next_event_id FROM "+b.names.Run+" WHERE run_id = $1", run.RunID).Scan(&next))
			return next
		}
		before := length()

		for range 4 {
			_, err := update(ctx, t, b.client, run, AddToCart{}, nil)
			var rejected *client.UpdateRejectedError
			require.ErrorAs(t, err, &rejected)
			_, err = update(ctx, t, b.client, run, Unhandled{}, nil)
			require.ErrorAs(t, err, &rejected)
		}
		require.Equal(t, before, length(), "rejected updates grew the history")

		// The run goes on from where it was.
		n, err = update(ctx, t, b.client, run, AddToCart{SKU: "pear"}, nil)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.NoError(t, b.client.Signal(ctx, run.WorkflowID, uuid.Nil, DoneSignal{}, nil))
		items, err := getWithin[[]string](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, []string{"reserved apple", "reserved pear"}, items)
		requireHistoryWellFormed(ctx, t, b, run)

		// The run closed: updates are rejected as WorkflowClosed.
		for _, runID := range []uuid.UUID{run.RunID, uuid.Nil} {
			_, err = update(ctx, t, b.client, b.client.GetRun(run.WorkflowID, runID), AddToCart{SKU: "late"}, nil)
			var rejected *client.UpdateRejectedError
			require.ErrorAs(t, err, &rejected)
			require.ErrorIs(t, err, client.ErrUpdateRejected)
			require.Equal(t, "WorkflowClosed", rejected.Failure.Type)
			require.Equal(t, run.RunID, rejected.RunID)
		}
	})

	t.Run("RunClosingRejectsWaitingUpdates", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		start(ctx, t, b)

		run, err := b.client.Start(ctx, CartArgs{}, nil)
		require.NoError(t, err)
		errs := make(chan error, 1)
		go func() {
			_, err := update(ctx, t, b.client, run, AddToCart{SKU: "slow"}, nil)
			errs <- err
		}()
		requireEventually(t, func() bool {
			var accepted int
			_ = b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.History+" WHERE run_id = $1 AND type = 'UpdateAccepted'", run.RunID).Scan(&accepted)
			return accepted == 1
		})
		require.NoError(t, b.client.Terminate(ctx, run.WorkflowID, run.RunID, "closing the shop"))

		select {
		case err := <-errs:
			var rejected *client.UpdateRejectedError
			require.ErrorAs(t, err, &rejected)
			require.Equal(t, "WorkflowClosed", rejected.Failure.Type)
		case <-time.After(time.Minute):
			t.Fatal("the waiting update never got an answer")
		}
	})
}
