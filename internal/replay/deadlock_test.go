package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/internal/replay/coroutine"
	"github.com/weirhq/weir/workflow"
)

func TestExecuteDeadlock(t *testing.T) {
	t.Parallel()

	release := make(chan struct{})
	unwound := make(chan struct{})
	def := define(func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
		defer close(unwound)
		waitForRealChannel(release) // wrong in workflow code: blocks outside the engine
		workflow.ExecuteActivity[int](ctx, ChargeArgs{}, nil)
		t.Error("abandoned workflow code must not schedule anything")
		return Receipt{}, nil
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.replayOnly = true // its code blocks once, on a channel closed once
	r.params.DeadlockTimeout = 100 * time.Millisecond
	_, err := r.try()
	require.ErrorIs(t, err, replay.ErrDeadlock)
	var deadlockErr *coroutine.DeadlockError
	require.ErrorAs(t, err, &deadlockErr)
	require.Contains(t, deadlockErr.Stack, "waitForRealChannel")
	require.Len(t, r.history, 1)

	close(release)
	<-unwound // unwound at its next call into the workflow package
}

func waitForRealChannel(c chan struct{}) { <-c }

func TestExecuteContextDoneWhileCodeRuns(t *testing.T) {
	t.Parallel()

	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	unwound := make(chan struct{})
	def := define(func(wctx workflow.Context, args OrderArgs) (Receipt, error) {
		defer close(unwound)
		cancel() // the worker's task deadline, say
		<-release
		workflow.Go(wctx, func(workflow.Context) {})
		return Receipt{}, nil
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	_, err := replay.Execute(ctx, def, &replay.ExecuteParams{History: r.history, Now: taskTime(1), DeadlockTimeout: -1})
	require.ErrorIs(t, err, context.Canceled)
	close(release)
	<-unwound
}
