package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/weirtest"
	"github.com/weirhq/weir/workflow"
)

// The workflow's logic, unit-tested in memory: no Postgres, and a fake clock
// that jumps to the next timer, so a three-day deadline passes at once.
func TestApprovalWorkflow(t *testing.T) {
	t.Parallel()

	newEnv := func(t *testing.T) (*weirtest.Env, *[]NotifyArgs) {
		env := weirtest.NewEnv(t, nil)
		var notified []NotifyArgs
		weirtest.OnActivity(env, NotifyArgs{}).ReturnFunc(func(ctx context.Context, args NotifyArgs) (any, error) {
			notified = append(notified, args)
			return struct{}{}, nil
		})
		return env, &notified
	}
	args := ApprovalArgs{RequestID: "r-1", Requester: "alice", Deadline: workflow.Duration(72 * time.Hour)}

	t.Run("ApprovedBeforeTheDeadline", func(t *testing.T) {
		t.Parallel()
		env, notified := newEnv(t)
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(Decision{Approved: true, By: "bob"}) }, 2*time.Hour)
		status, err := weirtest.ExecuteWorkflow(env, &ApprovalWorkflow{}, args)
		require.NoError(t, err)
		require.Equal(t, "approved", status.State)
		require.Equal(t, "bob", status.DecidedBy)
		require.Equal(t, []NotifyArgs{{To: "alice", RequestID: "r-1", State: "approved"}}, *notified)

		queried, err := weirtest.QueryWorkflow[Status](env, StatusQuery{})
		require.NoError(t, err)
		require.Equal(t, "approved", queried.State)
		weirtest.CheckGoldenHistory(t, env, &ApprovalWorkflow{}, "testdata/approved.json")
	})

	t.Run("DecisionAfterTheDeadlineIsIgnored", func(t *testing.T) {
		t.Parallel()
		env, notified := newEnv(t)
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(Decision{Approved: true, By: "bob"}) }, 73*time.Hour)
		status, err := weirtest.ExecuteWorkflow(env, &ApprovalWorkflow{}, args)
		require.NoError(t, err)
		require.Equal(t, "expired", status.State)
		require.Equal(t, weirtest.StartDefault.Add(72*time.Hour), status.Deadline)
		require.Equal(t, []NotifyArgs{{To: "alice", RequestID: "r-1", State: "expired"}}, *notified)
		weirtest.CheckGoldenHistory(t, env, &ApprovalWorkflow{}, "testdata/expired.json")
	})

	t.Run("Cancelled", func(t *testing.T) {
		t.Parallel()
		env, notified := newEnv(t)
		env.RegisterDelayedCallback(env.CancelWorkflow, time.Hour)
		_, err := weirtest.ExecuteWorkflow(env, &ApprovalWorkflow{}, args)
		var failed *client.WorkflowFailedError
		require.ErrorAs(t, err, &failed)
		require.Equal(t, "cancelled", failed.State)
		require.Empty(t, *notified)
		weirtest.CheckGoldenHistory(t, env, &ApprovalWorkflow{}, "testdata/cancelled.json")
	})
}
