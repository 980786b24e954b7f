package worker_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
)

// recordingInterceptor implements both worker.Interceptor and
// client.Interceptor.
type recordingInterceptor struct {
	mu         sync.Mutex
	name       string
	log        *[]string
	tasks      []*worker.TaskInfo
	activities []*worker.ActivityInfo
	starts     []*client.StartInfo
}

func (r *recordingInterceptor) InterceptTask(ctx context.Context, info *worker.TaskInfo, next func(context.Context) error) error {
	r.mu.Lock()
	r.tasks = append(r.tasks, info)
	*r.log = append(*r.log, r.name+" task in")
	r.mu.Unlock()
	err := next(ctx)
	r.mu.Lock()
	*r.log = append(*r.log, r.name+" task out")
	r.mu.Unlock()
	return err
}

func (r *recordingInterceptor) InterceptActivity(ctx context.Context, info *worker.ActivityInfo, next func(context.Context) error) error {
	r.mu.Lock()
	r.activities = append(r.activities, info)
	r.mu.Unlock()
	return next(ctx)
}

func (r *recordingInterceptor) InterceptStart(ctx context.Context, info *client.StartInfo, next func(context.Context) (*client.Run, error)) (*client.Run, error) {
	r.mu.Lock()
	r.starts = append(r.starts, info)
	r.mu.Unlock()
	return next(ctx)
}

func TestInterceptors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)

	var log []string
	outer := &recordingInterceptor{name: "outer", log: &log}
	inner := &recordingInterceptor{name: "inner", log: &log}
	startWorker(ctx, t, b, &worker.Config{Interceptors: []worker.Interceptor{outer, inner}})
	c, err := client.New(b.pool, &client.Config{Interceptors: []client.Interceptor{outer}, Schema: b.schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	run, err := c.Start(ctx, OrderArgs{ID: "i", Cents: []int64{1, 2}}, &client.StartOpts{WorkflowID: "intercepted"})
	require.NoError(t, err)
	_, err = getWithin[Receipt](ctx, t, run)
	require.NoError(t, err)

	outer.mu.Lock()
	defer outer.mu.Unlock()
	require.Len(t, outer.starts, 1)
	require.Equal(t, "intercepted", outer.starts[0].WorkflowID)
	require.Equal(t, "order", outer.starts[0].Kind)

	for _, task := range outer.tasks {
		t.Logf("task job %d attempt %d", task.JobID, task.Attempt)
	}
	require.Len(t, outer.tasks, 3, "one task to start, one per activity outcome")
	for _, task := range outer.tasks {
		require.Equal(t, run.RunID, task.RunID)
		require.Equal(t, "intercepted", task.WorkflowID)
		require.Equal(t, "order", task.Kind)
		require.Positive(t, task.JobID)
	}
	require.Len(t, outer.activities, 2)
	for _, a := range outer.activities {
		require.Equal(t, run.RunID, a.RunID)
		require.Equal(t, "charge", a.Kind)
		require.Equal(t, int64(1), a.Generation)
		require.Positive(t, a.ScheduledEventID)
	}
	require.Equal(t, []string{"outer task in", "inner task in", "inner task out", "outer task out"}, log[:4], "the first interceptor is outermost")
}
