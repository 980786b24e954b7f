package worker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

type ShipArgs struct {
	Order string `json:"order"`
	Fail  bool   `json:"fail"`
	Hang  bool   `json:"hang"`
}

func (ShipArgs) Kind() string { return "ship_order" }

// ShipWorkflow is the child: it charges (an activity) and returns a tracking
// number, fails, or waits for a signal that never comes.
type ShipWorkflow struct {
	workflow.Defaults[ShipArgs, string]
}

func (w *ShipWorkflow) Run(ctx workflow.Context, args ShipArgs) (string, error) {
	switch {
	case args.Fail:
		return "", &workflow.ApplicationError{Message: "no courier", Type: "NoCourier"}
	case args.Hang:
		_, err := workflow.GetSignalChannel[DoneSignal](ctx).Receive(ctx)
		return "", err
	}
	charge, err := workflow.ExecuteActivity[Charge](ctx, ChargeArgs{Order: args.Order, Cents: 1}, nil).Get(ctx)
	if err != nil {
		return "", err
	}
	return "tracking-" + charge.ID, nil
}

type FulfilArgs struct {
	Orders  []string `json:"orders"`
	Policy  string   `json:"policy"`
	ChildID string   `json:"child_id"`
}

func (FulfilArgs) Kind() string { return "fulfil" }

// FulfilWorkflow ships each order in a child workflow, at once.
type FulfilWorkflow struct {
	workflow.Defaults[FulfilArgs, []string]
}

func (w *FulfilWorkflow) Run(ctx workflow.Context, args FulfilArgs) ([]string, error) {
	var futures []workflow.Future[string]
	for _, order := range args.Orders {
		opts := &workflow.ChildWorkflowOpts{ParentClosePolicy: workflow.ParentClosePolicy(args.Policy), WorkflowID: args.ChildID}
		futures = append(futures, workflow.ExecuteChildWorkflow[string](ctx, ShipArgs{
			Order: order, Fail: order == "fail", Hang: order == "hang",
		}, opts))
	}
	var out []string
	for _, f := range futures {
		tracking, err := f.Get(ctx)
		var childErr *workflow.ChildWorkflowError
		switch {
		case errors.As(err, &childErr):
			out = append(out, fmt.Sprintf("%s: %s (%v)", childErr.WorkflowID, childErr.State, childErr.Cause))
		case err != nil:
			return nil, err
		default:
			out = append(out, tracking)
		}
	}
	return out, nil
}

func TestChildWorkflows(t *testing.T) {
	t.Parallel()

	start := func(ctx context.Context, t *testing.T, b *testBundle) {
		t.Helper()
		w, err := worker.New(b.pool, &worker.Config{Schema: b.schema, SweepInterval: time.Hour})
		require.NoError(t, err)
		worker.AddWorkflow(w, &FulfilWorkflow{})
		worker.AddWorkflow(w, &ShipWorkflow{})
		worker.AddActivity(w, b.charge)
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			require.NoError(t, w.Stop(stopCtx))
		})
	}

	t.Run("ResultsAndFailuresReachTheParentOnce", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		start(ctx, t, b)

		run, err := b.client.Start(ctx, FulfilArgs{Orders: []string{"a", "fail", "b"}}, &client.StartOpts{WorkflowID: "fulfil-1"})
		require.NoError(t, err)
		out, err := getWithin[[]string](ctx, t, run)
		require.NoError(t, err)
		require.Len(t, out, 3)
		require.Contains(t, out[0], "tracking-fulfil-1/child-")
		require.Contains(t, out[1], "failed")
		require.Contains(t, out[1], "no courier")
		require.Contains(t, out[2], "tracking-")

		// Each child is a run of its own, linked to the parent.
		runs, err := b.client.List(ctx, &client.ListOpts{Kind: "ship_order"})
		require.NoError(t, err)
		require.Len(t, runs.Runs, 3)
		var children int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.Run+" WHERE parent_run_id = $1", run.RunID).Scan(&children))
		require.Equal(t, 3, children)
		requireHistoryWellFormed(ctx, t, b, run)
	})

	t.Run("LiveChildIDIsNotStartedTwice", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		start(ctx, t, b)

		// The child's workflow ID is taken by a live run.
		_, err := b.client.Start(ctx, ShipArgs{Order: "hang", Hang: true}, &client.StartOpts{WorkflowID: "taken"})
		require.NoError(t, err)
		run, err := b.client.Start(ctx, FulfilArgs{Orders: []string{"x"}, ChildID: "taken"}, nil)
		require.NoError(t, err)
		out, err := getWithin[[]string](ctx, t, run)
		require.NoError(t, err)
		require.Len(t, out, 1)
		require.Contains(t, out[0], "taken: not_started")
	})

	t.Run("ParentClosePolicies", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		start(ctx, t, b)

		childState := func(workflowID string) string {
			desc, err := b.client.Describe(ctx, workflowID, uuid.Nil)
			require.NoError(t, err)
			return desc.State
		}
		for policy, want := range map[string]string{"terminate": "terminated", "abandon": "running", "request_cancel": "cancelled"} {
			parentID := "parent-" + policy
			run, err := b.client.Start(ctx, FulfilArgs{Orders: []string{"hang"}, Policy: policy, ChildID: "child-" + policy},
				&client.StartOpts{WorkflowID: parentID})
			require.NoError(t, err)
			requireEventually(t, func() bool {
				_, err := b.client.Describe(ctx, "child-"+policy, uuid.Nil)
				return err == nil
			})
			require.NoError(t, b.client.Terminate(ctx, parentID, run.RunID, "closing the parent"))
			requireEventually(t, func() bool { return childState("child-"+policy) == want })
		}
	})
}
