package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// WaitArgs are the args of an activity that runs until its context ends.
type WaitArgs struct {
	Key string `json:"key"`
}

func (WaitArgs) Kind() string { return "wait" }

// WaitActivity reports when it starts and when its context is cancelled.
type WaitActivity struct {
	activity.Defaults[WaitArgs, string]
	started   chan string
	cancelled chan string
}

func (a *WaitActivity) Execute(ctx context.Context, args WaitArgs) (string, error) {
	a.started <- args.Key
	<-ctx.Done()
	a.cancelled <- args.Key
	return "", ctx.Err()
}

type PauseArgs struct {
	Key string `json:"key"`
}

func (PauseArgs) Kind() string { return "pause" }

// PauseWorkflow runs WaitActivity: it only ends from outside.
type PauseWorkflow struct {
	workflow.Defaults[PauseArgs, string]
}

func (w *PauseWorkflow) Run(ctx workflow.Context, args PauseArgs) (string, error) {
	return workflow.ExecuteActivity[string](ctx, WaitArgs(args), nil).Get(ctx)
}

// EchoWorkflow completes at once.
type EchoWorkflow struct {
	workflow.Defaults[orderArgs, receipt]
}

func (w *EchoWorkflow) Run(ctx workflow.Context, args orderArgs) (receipt, error) {
	return receipt{Charged: args.Cents}, nil
}

func startOpsWorker(ctx context.Context, t *testing.T, b *testBundle) *WaitActivity {
	t.Helper()
	wait := &WaitActivity{started: make(chan string, 10), cancelled: make(chan string, 10)}
	w, err := worker.New(b.pool, &worker.Config{Schema: b.schema, SweepInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	worker.AddWorkflow(w, &PauseWorkflow{})
	worker.AddWorkflow(w, &EchoWorkflow{})
	worker.AddActivity(w, wait)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
	})
	return wait
}

func receive(t *testing.T, ch chan string) string {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(60 * time.Second):
		t.Fatal("nothing received")
		return ""
	}
}

func getResult[R any](ctx context.Context, t *testing.T, run *client.Run) (R, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return client.GetResult[R](ctx, run)
}

func TestTerminate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t, nil)
	wait := startOpsWorker(ctx, t, b)

	run, err := b.client.Start(ctx, PauseArgs{Key: "t"}, &client.StartOpts{WorkflowID: "terminate-me"})
	require.NoError(t, err)
	require.Equal(t, "t", receive(t, wait.started))

	desc, err := b.client.Describe(ctx, "terminate-me", uuid.Nil)
	require.NoError(t, err)
	require.Equal(t, "running", desc.State)
	require.Len(t, desc.PendingActivities, 1)
	pending := desc.PendingActivities[0]
	require.Equal(t, "wait", pending.Kind)
	require.Equal(t, "running", pending.JobState)
	require.Equal(t, 1, pending.Attempt)
	require.NotNil(t, pending.LeaseExpiresAt, "a fenced attempt holds a lease")
	require.True(t, pending.LeaseExpiresAt.After(time.Now().Add(-time.Minute)))

	require.NoError(t, b.client.Terminate(ctx, "terminate-me", uuid.Nil, "operator says stop"))
	require.Equal(t, "t", receive(t, wait.cancelled), "the running activity's context is cancelled")

	_, err = getResult[string](ctx, t, run)
	require.ErrorIs(t, err, client.ErrWorkflowTerminated)
	require.ErrorContains(t, err, "operator says stop")

	desc, err = b.client.Describe(ctx, "terminate-me", run.RunID)
	require.NoError(t, err)
	require.Equal(t, "terminated", desc.State)
	require.NotNil(t, desc.ClosedAt)
	require.Empty(t, desc.PendingActivities)

	// W6: the same outcome again is a no-op; a different one is refused.
	require.NoError(t, b.client.Terminate(ctx, "terminate-me", run.RunID, "operator says stop"))
	err = b.client.Terminate(ctx, "terminate-me", run.RunID, "another reason")
	var closed *client.RunClosedError
	require.ErrorAs(t, err, &closed)
	require.ErrorIs(t, err, client.ErrRunClosed)
	require.Equal(t, "terminated", closed.State)
	require.Equal(t, run.RunID, closed.RunID)

	completed, err := b.client.Start(ctx, orderArgs{ID: "done", Cents: 1}, nil)
	require.NoError(t, err)
	_, err = getResult[receipt](ctx, t, completed)
	require.NoError(t, err)
	err = b.client.Terminate(ctx, completed.WorkflowID, completed.RunID, "too late")
	require.ErrorAs(t, err, &closed)
	require.Equal(t, "completed", closed.State)

	err = b.client.Terminate(ctx, "no-such-workflow", uuid.Nil, "x")
	require.ErrorIs(t, err, client.ErrRunNotFound)
}

func TestRunTimeout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t, nil)
	wait := startOpsWorker(ctx, t, b)

	run, err := b.client.Start(ctx, PauseArgs{Key: "slow"}, &client.StartOpts{RunTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, "slow", receive(t, wait.started))

	_, err = getResult[string](ctx, t, run)
	require.ErrorIs(t, err, client.ErrWorkflowTimedOut)
	var failed *client.WorkflowFailedError
	require.ErrorAs(t, err, &failed)
	require.Equal(t, "timed_out", failed.State)
	require.Equal(t, "slow", receive(t, wait.cancelled))

	desc, err := b.client.Describe(ctx, run.WorkflowID, run.RunID)
	require.NoError(t, err)
	require.Equal(t, "timed_out", desc.State)
	require.NotNil(t, desc.RunDeadline)
	require.False(t, desc.ClosedAt.Before(*desc.RunDeadline), "closed at or after the deadline")

	_, err = b.client.Start(ctx, PauseArgs{}, &client.StartOpts{RunTimeout: -time.Second})
	require.Error(t, err)
}

func TestIDReusePolicy(t *testing.T) {
	t.Parallel()

	closeWith := func(ctx context.Context, t *testing.T, b *testBundle, workflowID, state string) {
		t.Helper()
		run, err := b.client.Start(ctx, orderArgs{ID: workflowID}, &client.StartOpts{WorkflowID: workflowID})
		require.NoError(t, err)
		closeRun(ctx, t, b, run.RunID, state, []byte(`{}`), []byte(`{"message":"x"}`), false)
	}

	for _, tc := range []struct {
		lastState string
		policy    client.IDReusePolicy
		allowed   bool
	}{
		{"completed", client.IDReuseAllowDuplicate, true},
		{"failed", client.IDReuseAllowDuplicate, true},
		{"completed", client.IDReuseAllowDuplicateFailedOnly, false},
		{"failed", client.IDReuseAllowDuplicateFailedOnly, true},
		{"terminated", client.IDReuseAllowDuplicateFailedOnly, true},
		{"timed_out", client.IDReuseAllowDuplicateFailedOnly, true},
		{"completed", client.IDReuseRejectDuplicate, false},
		{"failed", client.IDReuseRejectDuplicate, false},
	} {
		t.Run(fmt.Sprintf("%s/%s", tc.policy, tc.lastState), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			b := setup(ctx, t, nil)
			closeWith(ctx, t, b, "reuse", tc.lastState)

			run, err := b.client.Start(ctx, orderArgs{ID: "reuse"}, &client.StartOpts{WorkflowID: "reuse", IDReusePolicy: tc.policy})
			if tc.allowed {
				require.NoError(t, err)
				require.Equal(t, int64(2), run.Generation)
				return
			}
			var reuse *client.WorkflowIDReuseError
			require.ErrorAs(t, err, &reuse)
			require.ErrorIs(t, err, client.ErrWorkflowIDReuse)
			require.Equal(t, tc.lastState, reuse.LastState)
			require.Equal(t, int64(1), reuse.Generation)
			require.Equal(t, tc.policy, reuse.Policy)
		})
	}
}

func TestHistoryAndList(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t, nil)
	startOpsWorker(ctx, t, b)

	run, err := b.client.Start(ctx, orderArgs{ID: "h", Cents: 3}, &client.StartOpts{WorkflowID: "history-1"})
	require.NoError(t, err)
	_, err = getResult[receipt](ctx, t, run)
	require.NoError(t, err)

	t.Run("HistoryPages", func(t *testing.T) {
		desc, err := b.client.Describe(ctx, "history-1", uuid.Nil)
		require.NoError(t, err)
		require.Positive(t, desc.HistoryLength)

		var all []*client.Event
		opts := &client.HistoryOpts{Limit: 1}
		for {
			page, err := b.client.History(ctx, "history-1", uuid.Nil, opts)
			require.NoError(t, err)
			all = append(all, page.Events...)
			if page.NextAfterEventID == 0 {
				break
			}
			opts.AfterEventID = page.NextAfterEventID
		}
		require.Len(t, all, int(desc.HistoryLength))
		for i, e := range all {
			require.Equal(t, int64(i+1), e.ID)
		}
		require.Equal(t, client.EventWorkflowStarted, all[0].Type)
		require.Equal(t, client.EventWorkflowCompleted, all[len(all)-1].Type)
		started, err := client.DecodeAttributes[struct {
			Kind string `json:"kind"`
		}](all[0])
		require.NoError(t, err)
		require.Equal(t, "order", started.Kind)

		var buf bytes.Buffer
		require.NoError(t, b.client.WriteHistoryJSON(ctx, &buf, "history-1", uuid.Nil))
		var export client.HistoryExport
		require.NoError(t, json.Unmarshal(buf.Bytes(), &export))
		require.Equal(t, run.RunID, export.RunID)
		require.Len(t, export.Events, len(all))

		_, err = b.client.History(ctx, "history-1", uuid.Nil, &client.HistoryOpts{Limit: client.HistoryPageSizeMax + 1})
		require.Error(t, err)
	})

	t.Run("ListPagesAndFilters", func(t *testing.T) {
		for i := range 25 {
			id := fmt.Sprintf("list_%02d", i)
			if i%5 == 0 {
				id = fmt.Sprintf("other%%%02d", i) // a LIKE wildcard in the ID
			}
			_, err := b.client.Start(ctx, PauseArgs{Key: "list"}, &client.StartOpts{WorkflowID: id, Queue: "unserved"})
			require.NoError(t, err)
		}

		seen := map[uuid.UUID]bool{}
		var previous *client.RunSummary
		opts := &client.ListOpts{Kind: "pause", Limit: 7}
		for {
			page, err := b.client.List(ctx, opts)
			require.NoError(t, err)
			for _, r := range page.Runs {
				require.False(t, seen[r.RunID], "no run twice")
				seen[r.RunID] = true
				require.Equal(t, "pause", r.Kind)
				if previous != nil {
					require.False(t, r.CreatedAt.After(previous.CreatedAt), "newest first")
				}
				previous = r
			}
			if page.NextCursor == "" {
				break
			}
			opts.Cursor = page.NextCursor
		}
		require.Len(t, seen, 25)

		prefixed, err := b.client.List(ctx, &client.ListOpts{WorkflowIDPrefix: "list_"})
		require.NoError(t, err)
		require.Len(t, prefixed.Runs, 20, "_ is matched literally")
		wild, err := b.client.List(ctx, &client.ListOpts{WorkflowIDPrefix: "other%"})
		require.NoError(t, err)
		require.Len(t, wild.Runs, 5, "% is matched literally")

		completed, err := b.client.List(ctx, &client.ListOpts{State: "completed"})
		require.NoError(t, err)
		require.Len(t, completed.Runs, 1)
		require.Equal(t, "history-1", completed.Runs[0].WorkflowID)

		none, err := b.client.List(ctx, &client.ListOpts{CreatedAfter: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		require.Empty(t, none.Runs)
		other, err := b.client.List(ctx, &client.ListOpts{Namespace: "elsewhere"})
		require.NoError(t, err)
		require.Empty(t, other.Runs, "namespaces don't mix")

		_, err = b.client.List(ctx, &client.ListOpts{Cursor: "not-a-cursor"})
		require.ErrorIs(t, err, client.ErrInvalidCursor)
		_, err = b.client.List(ctx, &client.ListOpts{Limit: client.ListLimitMax + 1})
		require.Error(t, err)
	})
}

func TestPayloadLimit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t, &client.Config{MaxPayloadBytes: 100})

	_, err := b.client.Start(ctx, orderArgs{ID: strings.Repeat("x", 200)}, &client.StartOpts{WorkflowID: "big"})
	require.ErrorIs(t, err, client.ErrPayloadTooLarge)
	require.ErrorIs(t, err, client.ErrPayload)
	require.ErrorContains(t, err, "args of workflow big is 219 bytes, the limit is 100")
	_, err = b.client.Start(ctx, orderArgs{ID: "small"}, nil)
	require.NoError(t, err)
}
