package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/workflow"
	"github.com/weirhq/weir/workflow/workflowtest"
)

// The workflow's logic, unit-tested in memory: no Postgres, and a fake clock
// that jumps to the next timer, so a three-day deadline passes at once.
func TestApprovalWorkflow(t *testing.T) {
	t.Parallel()

	newEnv := func(t *testing.T) (*workflowtest.Env, *[]NotifyArgs) {
		env := workflowtest.New(t, nil)
		var notified []NotifyArgs
		workflowtest.OnActivity(env, func(ctx context.Context, args NotifyArgs) (struct{}, error) {
			notified = append(notified, args)
			return struct{}{}, nil
		})
		return env, &notified
	}
	args := ApprovalArgs{RequestID: "r-1", Requester: "alice", Deadline: 72 * time.Hour}

	t.Run("ApprovedBeforeTheDeadline", func(t *testing.T) {
		t.Parallel()
		env, notified := newEnv(t)
		env.SignalAfter(2*time.Hour, Decision{Approved: true, By: "bob"})
		status, err := workflowtest.Execute(env, &ApprovalWorkflow{}, args)
		require.NoError(t, err)
		require.Equal(t, "approved", status.State)
		require.Equal(t, "bob", status.DecidedBy)
		require.Equal(t, []NotifyArgs{{To: "alice", RequestID: "r-1", State: "approved"}}, *notified)

		queried, err := workflowtest.Query[Status](env, StatusQuery{})
		require.NoError(t, err)
		require.Equal(t, "approved", queried.State)
	})

	t.Run("DecisionAfterTheDeadlineIsIgnored", func(t *testing.T) {
		t.Parallel()
		env, notified := newEnv(t)
		env.SignalAfter(73*time.Hour, Decision{Approved: true, By: "bob"})
		status, err := workflowtest.Execute(env, &ApprovalWorkflow{}, args)
		require.NoError(t, err)
		require.Equal(t, "expired", status.State)
		require.Equal(t, workflowtest.StartDefault.Add(72*time.Hour), status.Deadline)
		require.Equal(t, []NotifyArgs{{To: "alice", RequestID: "r-1", State: "expired"}}, *notified)
	})

	t.Run("Cancelled", func(t *testing.T) {
		t.Parallel()
		env, notified := newEnv(t)
		env.CancelAfter(time.Hour)
		_, err := workflowtest.Execute(env, &ApprovalWorkflow{}, args)
		require.ErrorIs(t, err, workflow.ErrCanceled)
		require.Empty(t, *notified)
	})
}
