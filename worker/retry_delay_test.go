package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

type FailOnceArgs struct {
	Key string `json:"key"`
}

func (FailOnceArgs) Kind() string { return "fail_once" }

// FailOnceActivity fails its first attempt of each key and notes when
// that attempt failed and when the next one began.
type FailOnceActivity struct {
	activity.Defaults[FailOnceArgs, string]

	mu      sync.Mutex
	failed  map[string]time.Time
	retried map[string]time.Time
}

func (a *FailOnceActivity) Execute(ctx context.Context, args FailOnceArgs) (string, error) {
	info, _ := activity.GetInfo(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	if info.Attempt == 1 {
		a.failed[args.Key] = time.Now()
		return "", errors.New("first attempts fail")
	}
	if _, ok := a.retried[args.Key]; !ok {
		a.retried[args.Key] = time.Now()
	}
	return "ok", nil
}

type FailOnceWorkflowArgs struct {
	Key string `json:"key"`
}

func (FailOnceWorkflowArgs) Kind() string { return "fail_once_workflow" }

type FailOnceWorkflow struct {
	workflow.Defaults[FailOnceWorkflowArgs, string]
}

func (*FailOnceWorkflow) Run(ctx workflow.Context, args FailOnceWorkflowArgs) (string, error) {
	return workflow.ExecuteActivity[string](ctx, FailOnceArgs(args), &workflow.ActivityOpts{
		RetryPolicy: &workflow.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumAttempts: 3},
	}).Get(ctx)
}

// TestFirstRetryHonoursInterval: the retry of a failed first attempt (run
// eagerly by the worker that scheduled it) waits its retry policy's
// interval, not River's scheduler tick (every 5 s, on the leader).
func TestFirstRetryHonoursInterval(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	flaky := &FailOnceActivity{failed: map[string]time.Time{}, retried: map[string]time.Time{}}
	w, err := worker.New(b.pool, &worker.Config{Schema: b.schema})
	require.NoError(t, err)
	worker.AddWorkflow(w, &FailOnceWorkflow{})
	worker.AddActivity(w, flaky)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
	})

	// Rounds one after another: a retry that waited for a scheduler tick
	// comes up to 5 s late, each round at an independent phase of it.
	const slack = 800 * time.Millisecond // a loaded machine
	for _, key := range []string{"a", "b", "c", "d", "e"} {
		run, err := b.client.Start(ctx, FailOnceWorkflowArgs{Key: key}, &client.StartOpts{WorkflowID: "flaky-" + key})
		require.NoError(t, err)
		result, err := getWithin[string](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, "ok", result)
		flaky.mu.Lock()
		delay := flaky.retried[key].Sub(flaky.failed[key])
		flaky.mu.Unlock()
		t.Logf("round %s: retried %v after the failure", key, delay)
		require.GreaterOrEqual(t, delay, 100*time.Millisecond, "round %s: the retry came before its interval", key)
		require.Less(t, delay, max(100*time.Millisecond, time.Second)+slack, "round %s: the retry waited for River's scheduler", key)
	}
}
